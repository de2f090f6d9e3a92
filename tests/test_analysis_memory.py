"""The analysis' memory on a long series is bounded and stated, and bounding it changed no result.

The loss detectors work on whole-series float64 arrays (8 bytes a point each); what sets the
peak is how many of them, temporaries included, are alive at once. tracemalloc sees every numpy
and scipy array, so the peak of a check over what was held before it is an exact, deterministic
count of bytes (no timing, no RSS noise). The budget is the README's figure.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import ndimage, special

from tb_health_plugin.analysis.detectors import robust
from tb_health_plugin.analysis.detectors.divergence import loss_divergence
from tb_health_plugin.analysis.detectors.robust import (
    NoiseTail,
    cumulative_sum,
    largest_indices,
    map_blocks,
    median_filter,
    rolling_median,
)
from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes
from tb_health_plugin.analysis.detectors.stall import stalled_convergence
from tb_health_plugin.analysis.engine import findings_for_run
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries
from tests.test_rolling_median import (
    former_level_median,
    former_noise_level,
    former_trend_median,
    random_series,
)

# Peak of the analysis of one run over what its data already holds, in bytes per loss point:
# ten float64 copies of the series (the README's "Memory" paragraph states it).
BUDGET_BYTES_PER_POINT = 80
POINTS = 1_000_000  # long enough that the per-block temporaries (a few 512 KiB) are negligible


def long_loss(points: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A falling noisy loss with a one-point spike, a 4-point spike and a short plateau: every
    stage of the spike detector (both scans, the screen, the masking passes) has work to do."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64)
    loss = 3.0 * np.exp(-steps / (points / 4)) + 0.5 + rng.normal(0, 0.02, points)
    loss[points // 3] = 40.0
    loss[points // 2 : points // 2 + 4] *= 3.0
    loss[2 * points // 3 : 2 * points // 3 + 6] *= 1.3
    return steps, loss


def traced_peak(function) -> tuple[int, int, object]:
    """(peak over what was held before, what is still held after, result) of one call."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = function()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before, held - before, result


@pytest.fixture(scope="module")
def long_run() -> RunSignals:
    steps, loss = long_loss(POINTS)
    findings_for_run(RunSignals.from_run(_run(steps[:2000], loss[:2000])))  # lazy imports happen here
    return RunSignals.from_run(_run(steps, loss))


def _run(steps: np.ndarray, loss: np.ndarray) -> RunData:
    return RunData("long", {"train/loss": ScalarSeries(steps, steps.astype(np.float64), loss)})


def test_the_checks_of_a_run_peak_under_the_budget_and_keep_nothing(long_run):
    peak, held, findings = traced_peak(lambda: findings_for_run(long_run))
    assert any(f.kind == "loss_spike" for f in findings)  # the detectors did their whole work
    assert peak / POINTS <= BUDGET_BYTES_PER_POINT, f"{peak / POINTS:.1f} bytes a point"
    assert held < 1024 * 1024  # nothing of one run's analysis outlives it (the next run's would add up)


@pytest.mark.parametrize("detector", [loss_spikes, loss_divergence, stalled_convergence])
def test_each_loss_detector_peaks_under_the_budget(long_run, detector):
    loss = long_run.loss
    schedule = infer_schedule(loss.steps)
    peak, _, _ = traced_peak(lambda: detector(loss.steps, loss.values, "train/loss", schedule))
    assert peak / POINTS <= BUDGET_BYTES_PER_POINT, f"{detector.__name__}: {peak / POINTS:.1f} bytes a point"


@pytest.mark.parametrize("seed", range(20))
def test_block_by_block_medians_equal_the_whole_series_ones(monkeypatch, seed):
    # small blocks, so that short random series cross many block edges near both ends
    monkeypatch.setattr(robust, "BLOCK_POINTS", int(np.random.default_rng(seed).integers(1, 40)))
    rng = np.random.default_rng(3000 + seed)
    for _ in range(30):
        n = int(rng.integers(1, 400))
        y = random_series(rng, n, nonfinite=False)
        window = int(rng.integers(1, 80))
        np.testing.assert_array_equal(rolling_median(y, window, edges="trend"), former_trend_median(y, window))
        np.testing.assert_array_equal(
            rolling_median(np.abs(y), window, edges="mirror_within"), former_noise_level(np.abs(y), window)
        )
        width = min(int(rng.integers(1, 12)) * 2 + 1, 2 * n - 1)
        values = random_series(rng, n, nonfinite=True)
        np.testing.assert_array_equal(rolling_median(values, width, edges="mirror"), former_level_median(values, width))


def test_block_by_block_medians_at_full_block_size():
    y = random_series(np.random.default_rng(7), 5 * robust.BLOCK_POINTS + 123, nonfinite=False)
    head, tail = np.array([5.0, -5.0, 0.5]), np.array([1.0, 2.0])
    for size, mode in ((33, "nearest"), (265, "mirror"), (4, "mirror"), (17, "nearest")):
        whole = ndimage.median_filter(np.concatenate([head, y, tail]), size=size, mode=mode)
        np.testing.assert_array_equal(median_filter(y, size, mode, head, tail), whole[head.size : head.size + y.size])


def test_elementwise_maps_and_running_sums_give_the_same_values():
    rng = np.random.default_rng(11)
    z = rng.standard_t(3, size=3 * robust.BLOCK_POINTS + 17) * 3
    tail = NoiseTail(3.0, 0.95)

    def surprise(part: np.ndarray) -> np.ndarray:
        return np.where(part > 0, -tail.log_sf(np.maximum(part, 0.0)), 0.0)

    np.testing.assert_array_equal(map_blocks(surprise, z), surprise(z))
    np.testing.assert_array_equal(map_blocks(special.log_ndtr, z), special.log_ndtr(z))
    np.testing.assert_array_equal(cumulative_sum(z), np.concatenate([[0.0], np.cumsum(z)]))
    np.testing.assert_array_equal(cumulative_sum(z > 0, dtype=np.int32), np.concatenate([[0], np.cumsum(z > 0)]))


@pytest.mark.parametrize("seed", range(10))
def test_the_largest_values_block_by_block_are_the_whole_series_ones(monkeypatch, seed):
    monkeypatch.setattr(robust, "BLOCK_POINTS", int(np.random.default_rng(seed).integers(1, 30)))
    rng = np.random.default_rng(4000 + seed)
    for _ in range(30):
        x = rng.standard_t(3, size=int(rng.integers(1, 200)))
        count = int(rng.integers(1, 12))
        np.testing.assert_array_equal(largest_indices(x, count), np.argsort(-x, kind="stable")[:count])
