"""The series route carries each bucket's wall time, for the tab's relative and wall-time axes."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.run_data import ScalarSeries
from tb_health_plugin.views.envelope import envelope


def test_every_bucket_carries_the_wall_time_of_its_first_point():
    steps = np.arange(1000)
    walls = 1_767_000_000.0 + 2.5 * steps
    series = ScalarSeries.from_lists(steps, np.ones(1000), walls)
    out = envelope(series, width=100)
    assert out["downsampled"] and len(out["wall_times"]) == len(out["steps"]) == 100
    assert out["wall_times"] == [1_767_000_000.0 + 2.5 * s for s in out["steps"]]
    assert out["first_wall_time"] == 1_767_000_000.0
    zoomed = envelope(series, width=1000, start=400, end=409)
    assert zoomed["wall_times"] == (1_767_000_000.0 + 2.5 * np.arange(400, 410)).tolist()
    assert zoomed["first_wall_time"] == 1_767_000_000.0  # the run's start, not the window's
    empty = envelope(ScalarSeries.from_lists([], [], []), width=100)
    assert empty["wall_times"] == [] and empty["first_wall_time"] is None
