"""Step-time regressions within a run, and ranks that depart from the rest of their job.

Within a run (on log step time, or log of 1/throughput, after `warmup_points` for compilation):
the single best change point under an L1 cost (sum of absolute deviations from each segment's
median, the `l1` cost of ruptures' binary segmentation, robust to the periodic spikes of
evaluation and checkpointing), searched over splits leaving `MIN_SEGMENT_SHARE` of the points on
each side. A slow drift with no single change point is caught by comparing the last
`MIN_SEGMENT_SHARE` of the points with the first. It is a regression when the later segment's median is `SLOWDOWN_WARNING` (1.25x) or
more above the earlier one and a one-sided Mann-Whitney U test rejects "no slower" at
`P_VALUE`; critical from `SLOWDOWN_CRITICAL` (2x: half the compute is lost).

Across the `rank_<id>` runs of a job:
* step time: a rank whose median step time is `RANK_SLOWDOWN` (1.2x) above the median of the
  other ranks' medians, and (with 3 or more ranks) outside their spread by `RANK_MADS`
  median absolute deviations (the MAD floored at 2% so identical ranks do not make any jitter
  an outlier).
* loss (3 or more ranks, so the odd one out is identifiable): per step, each rank's relative
  deviation from the ranks' median loss, rolling-median smoothed; a rank departs when it stays
  above `RANK_LOSS_DEVIATION` (10%) and `RANK_LOSS_SPREADS` times the typical deviation of the
  ranks for `sustained_length(n, 0.1)` points. Ranks with a constant loss (pipeline stages that
  do not compute it) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

from tb_health_plugin.analysis.detectors.robust_levels import (
    first_sustained_run,
    median_window,
    rolling_median,
    sustained_length,
    warmup_points,
)

SLOWDOWN_WARNING = 1.25
SLOWDOWN_CRITICAL = 2.0
P_VALUE = 1e-3
MIN_SEGMENT_SHARE = 0.1
MIN_SEGMENT_POINTS = 5
MAX_POINTS = 600  # longer series are median-pooled to this many points before the search
RANK_SLOWDOWN = 1.2
RANK_MADS = 5.0
MAD_FLOOR_SHARE = 0.02
RANK_LOSS_DEVIATION = 0.1
RANK_LOSS_SPREADS = 5.0


@dataclass(frozen=True)
class Slowdown:
    index: int  # first point of the slow segment (an index into the input arrays)
    ratio: float
    severity: str
    evidence: dict[str, Any] = field(default_factory=dict)


def step_time_regression(step_time: np.ndarray) -> Slowdown | None:
    """The best change point of a step-time series, when it is a significant slowdown."""
    values = np.asarray(step_time, dtype=np.float64)
    valid = np.flatnonzero(np.isfinite(values) & (values > 0))
    warm = warmup_points(valid.size)
    valid = valid[warm:]
    min_points = max(MIN_SEGMENT_POINTS, int(np.ceil(MIN_SEGMENT_SHARE * valid.size)))
    if valid.size < 2 * min_points:
        return None
    logs = np.log(values[valid])
    pooled, block = _pool(logs)
    min_pooled = max(2, int(np.ceil(min_points / block)))
    best_k, best_cost = None, np.inf
    for k in range(min_pooled, pooled.size - min_pooled + 1):
        left, right = pooled[:k], pooled[k:]
        cost = np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum()
        if cost < best_cost:
            best_k, best_cost = k, cost
    if best_k is None:
        return None
    split = best_k * block
    before, after = logs[:split], logs[split:]
    ratio = float(np.exp(np.median(after) - np.median(before)))
    if ratio < SLOWDOWN_WARNING:
        return _gradual_regression(logs, valid, min_points)
    p_value = float(mannwhitneyu(after, before, alternative="greater").pvalue)
    if p_value >= P_VALUE:
        return None
    # the onset: the first point of the slow segment's neighbourhood that is already slow
    threshold = np.median(before) + np.log(SLOWDOWN_WARNING)
    onset = split
    while onset - 1 >= 0 and logs[onset - 1] >= threshold and split - onset < block:
        onset -= 1
    return Slowdown(
        index=int(valid[onset]),
        ratio=ratio,
        severity="critical" if ratio >= SLOWDOWN_CRITICAL else "warning",
        evidence={
            "median_before": float(np.exp(np.median(before))),
            "median_after": float(np.exp(np.median(after))),
            "slowdown": ratio,
            "p_value": p_value,
        },
    )


def _gradual_regression(logs: np.ndarray, valid: np.ndarray, min_points: int) -> Slowdown | None:
    """A slow drift: the last `min_points` against the first ones (no single change point)."""
    first, last = logs[:min_points], logs[-min_points:]
    ratio = float(np.exp(np.median(last) - np.median(first)))
    if ratio < SLOWDOWN_WARNING:
        return None
    p_value = float(mannwhitneyu(last, first, alternative="greater").pvalue)
    if p_value >= P_VALUE:
        return None
    level = rolling_median(logs, median_window(logs.size))
    onset = int(np.argmax(level >= np.median(first) + np.log(SLOWDOWN_WARNING)))
    return Slowdown(
        index=int(valid[onset]),
        ratio=ratio,
        severity="critical" if ratio >= SLOWDOWN_CRITICAL else "warning",
        evidence={
            "median_before": float(np.exp(np.median(first))),
            "median_after": float(np.exp(np.median(last))),
            "slowdown": ratio,
            "p_value": p_value,
            "gradual": True,
        },
    )


def _pool(logs: np.ndarray) -> tuple[np.ndarray, int]:
    block = int(np.ceil(logs.size / MAX_POINTS))
    if block <= 1:
        return logs, 1
    usable = logs[: (logs.size // block) * block]
    return np.median(usable.reshape(-1, block), axis=1), block


def rank_step_time_outliers(medians: dict[str, float]) -> dict[str, dict[str, float]]:
    """Ranks whose median step time lags the others (see module doc): rank -> evidence."""
    names = [r for r, v in medians.items() if np.isfinite(v) and v > 0]
    out = {}
    if len(names) < 2:
        return out
    for rank in names:
        others = np.array([medians[r] for r in names if r != rank])
        centre = float(np.median(others))
        ratio = medians[rank] / centre
        if ratio < RANK_SLOWDOWN:
            continue
        if others.size >= 2:
            mad = max(float(np.median(np.abs(others - centre))), MAD_FLOOR_SHARE * centre)
            if (medians[rank] - centre) / mad < RANK_MADS:
                continue
        out[rank] = {"median_step_time_ms": medians[rank], "others_median_ms": centre, "slowdown": ratio}
    return out


def rank_loss_departures(steps: np.ndarray, losses: dict[str, np.ndarray]) -> dict[str, tuple[int, dict]]:
    """Ranks whose loss departs from the job's (see module doc): rank -> (first index, evidence).

    `losses` are aligned on `steps` (NaN where a rank did not log that step).
    """
    ranks = [
        r
        for r, v in losses.items()
        if np.nanstd(np.where(np.isfinite(v), v, np.nan)) > 0 or not np.all(np.isfinite(v))
    ]
    if len(ranks) < 3 or steps.size < 3:
        return {}
    matrix = np.vstack([losses[r] for r in ranks])
    finite = np.where(np.isfinite(matrix), matrix, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.nanmedian(finite, axis=0)
        deviation = np.abs(matrix - centre) / np.abs(centre)
    deviation[~np.isfinite(matrix)] = np.inf  # a non-finite loss on one rank departs fully
    deviation[:, ~np.isfinite(centre)] = np.nan
    typical = float(np.nanmedian(np.where(np.isfinite(deviation), deviation, np.nan)))
    limit = max(RANK_LOSS_DEVIATION, RANK_LOSS_SPREADS * (typical if np.isfinite(typical) else 0.0))
    n = steps.size
    out = {}
    for row, rank in enumerate(ranks):
        level = rolling_median(deviation[row], median_window(n))
        run = first_sustained_run(level >= limit, sustained_length(n, share=0.1))
        if run is None:
            continue
        start = run[0]
        while start - 1 >= 0 and deviation[row, start - 1] >= limit:
            start -= 1
        window = deviation[row, start : run[1]]
        out[rank] = (
            start,
            {
                "median_relative_deviation": float(np.median(window)),
                "threshold": limit,
                "typical_rank_deviation": typical,
            },
        )
    return out
