"""What the CLI's one-shot read keeps per point: exactly the numpy columns, no spare capacity."""

from __future__ import annotations

import numpy as np

from bench.event_records import write_scalar_events
from tb_health_plugin.readers import read_logdir
from tb_health_plugin.readers.logdir_reader import READ_CHUNK_BYTES


def test_read_logdir_keeps_24_bytes_per_scalar_point(tmp_path):
    points = 60_000  # about 2.9 MB of events: more than one read chunk, so the columns grew
    path = tmp_path / "run" / "events.out.tfevents.1767000000.test"
    path.parent.mkdir()
    steps = np.arange(points)
    write_scalar_events(path, steps, {"train/loss": 1.0 / (1.0 + steps)})
    assert path.stat().st_size > READ_CHUNK_BYTES
    (run,) = read_logdir(tmp_path)
    series = run.scalars["train/loss"]
    assert len(series) == points
    held = sum(column.base.nbytes if column.base is not None else column.nbytes
               for column in (series.steps, series.wall_times, series.values))
    assert held == 24 * points
