"""Min/max envelope downsampling keeps extremes and handles non-finite points."""

import numpy as np

from tb_health_plugin.run_data import ScalarSeries
from tb_health_plugin.views.envelope import envelope


def test_every_extreme_survives_downsampling():
    rng = np.random.default_rng(0)
    values = rng.normal(size=1_000_003)
    values[777_777] = 1e6
    values[123_456] = -1e6
    series = ScalarSeries.from_lists(np.arange(values.size), values)
    out = envelope(series, width=1000)
    assert len(out["steps"]) == 1000
    assert max(out["max"]) == 1e6 and min(out["min"]) == -1e6
    assert out["steps"][0] == 0


def test_all_nan_bucket_is_null_and_listed():
    values = np.array([1.0, 2.0, np.nan, np.inf, 5.0, 6.0])
    out = envelope(ScalarSeries.from_lists(range(6), values), width=10)
    assert out["min"] == [1.0, 2.0, None, None, 5.0, 6.0]
    assert out["nonfinite"] == [{"step": 2, "value": "nan"}, {"step": 3, "value": "inf"}]
    coarse = envelope(ScalarSeries.from_lists(range(600), np.r_[np.full(300, np.nan), np.ones(300)]), width=10)
    assert coarse["min"][:5] == [None] * 5 and coarse["min"][5:] == [1.0] * 5
    assert coarse["nonfinite_total"] == 300
