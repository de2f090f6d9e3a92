"""The one `rolling_median` reproduces the three it replaced, each under its named edge rule.

The loss detectors used a median whose ends continue the trend (`robust.rolling_median`), the
level detectors one with mirrored ends and NaN filling (`robust_levels.rolling_median`), the
spike detector's noise scale one with mirrored ends and a window no longer than the series
(`robust.rolling_level`). The former functions are kept below verbatim as oracles; random
series (with NaN and inf for the level case, finite ones for the loss and noise cases, whose
callers drop non-finite points first) must give bit-identical outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from tb_health_plugin.analysis.detectors.robust import odd_window, rolling_median


def former_trend_median(y: np.ndarray, window: int) -> np.ndarray:
    n = y.size
    if n == 0:
        return y.copy()
    window = min(odd_window(window), odd_window(n, 1))
    half = window // 2
    if half == 0:
        return y.copy()
    c = 2 if n >= 2 * 2 + half + 1 else 0
    pad = min(half, n - 1 - 2 * c)
    head_anchor = np.median(y[: 2 * c + 1])
    tail_anchor = np.median(y[n - 2 * c - 1 :])
    k = np.arange(pad, 0, -1)
    head = 2 * head_anchor - y[2 * c + k]
    tail = 2 * tail_anchor - y[n - 1 - 2 * c - k[::-1]]
    padded = np.concatenate([head, y, tail])
    filtered = ndimage.median_filter(padded, size=window, mode="nearest")
    return filtered[pad : pad + n]


def former_level_median(values: np.ndarray, width: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    nan = np.isnan(values)
    if not nan.any() or nan.all():
        filled = values.copy()
    else:
        index = np.arange(values.size)
        good = index[~nan]
        nearest = good[np.clip(np.searchsorted(good, index), 0, good.size - 1)]
        before = good[np.clip(np.searchsorted(good, index) - 1, 0, good.size - 1)]
        pick = np.where(np.abs(before - index) <= np.abs(nearest - index), before, nearest)
        filled = values[pick]
    if np.all(np.isnan(filled)):
        return filled
    return ndimage.median_filter(filled, size=width, mode="mirror")


def former_noise_level(x: np.ndarray, window: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    return ndimage.median_filter(x, size=min(odd_window(window), odd_window(x.size, 1)), mode="mirror")


def random_series(rng: np.random.Generator, n: int, nonfinite: bool) -> np.ndarray:
    shape = rng.choice(["noise", "slope", "steps", "heavy"])
    x = np.arange(n, dtype=np.float64)
    base = {
        "noise": rng.normal(size=n),
        "slope": rng.normal(scale=0.1, size=n) - rng.uniform(0.001, 0.1) * x,
        "steps": np.repeat(rng.normal(size=max(n // 7, 1)), 7)[:n] if n >= 7 else rng.normal(size=n),
        "heavy": rng.standard_t(1.5, size=n),
    }[shape]
    base = np.resize(base, n)
    if nonfinite and n:
        for bad in (np.nan, np.inf, -np.inf):
            base[rng.random(n) < rng.uniform(0, 0.2)] = bad
        if rng.random() < 0.05:
            base[:] = np.nan
    return base


@pytest.mark.parametrize("seed", range(40))
def test_trend_edges_give_the_former_loss_median(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(0, 400))
        window = int(rng.integers(1, 60))
        y = random_series(rng, n, nonfinite=False)
        np.testing.assert_array_equal(rolling_median(y, window, edges="trend"), former_trend_median(y, window))


@pytest.mark.parametrize("seed", range(40))
def test_mirror_edges_give_the_former_level_median(seed):
    rng = np.random.default_rng(1000 + seed)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        # the former function read outside the array for a window wider than one reflection
        width = min(int(rng.integers(1, 12)) * 2 + 1, 2 * n - 1)
        values = random_series(rng, n, nonfinite=True)
        np.testing.assert_array_equal(rolling_median(values, width, edges="mirror"), former_level_median(values, width))


@pytest.mark.parametrize("seed", range(40))
def test_mirror_within_edges_give_the_former_noise_level(seed):
    # its caller passes |residual| of finite log losses: finite, non-negative, any length, and a
    # window (8 trend windows) that is often longer than the run
    rng = np.random.default_rng(2000 + seed)
    for _ in range(50):
        n = int(rng.integers(0, 400))
        window = int(rng.integers(1, 600))
        values = np.abs(random_series(rng, n, nonfinite=False))
        np.testing.assert_array_equal(
            rolling_median(values, window, edges="mirror_within"), former_noise_level(values, window)
        )


def test_mirror_within_differs_from_mirror_on_a_series_shorter_than_the_window():
    values = np.r_[np.zeros(10), np.ones(20)]
    assert not np.array_equal(rolling_median(values, 41, edges="mirror_within"),
                              rolling_median(values, 41, edges="mirror"))


def test_mirror_edges_stay_within_the_values_for_any_width():
    # the former level median gave whatever scipy's mirror mode read past a short array
    for value in (0.5, -3.0, np.inf):
        for width in (3, 9, 21):
            assert rolling_median(np.array([value]), width, edges="mirror").tolist() == [value]
    rng = np.random.default_rng(5)
    for _ in range(200):
        values = rng.normal(size=int(rng.integers(1, 6))) + 100.0
        level = rolling_median(values, int(rng.integers(1, 12)) * 2 + 1, edges="mirror")
        assert values.min() <= level.min() and level.max() <= values.max()


def test_the_edge_rules_differ_on_a_slope_and_an_unknown_rule_is_refused():
    falling = -0.05 * np.arange(40.0)
    assert np.allclose(rolling_median(falling, 9, edges="trend"), falling)
    assert not np.allclose(rolling_median(falling, 9, edges="mirror"), falling)
    with pytest.raises(ValueError, match="edges"):
        rolling_median(falling, 9, edges="nearest")  # type: ignore[arg-type]
