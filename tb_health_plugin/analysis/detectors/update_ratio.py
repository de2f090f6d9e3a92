"""Weights over time: updates too large, weights that stop changing, drift and saturation.

* update ratio r = ||w_t - w_{t-1}|| / ||w_{t-1}|| (logged by our hooks as `update_ratio/<param>`).
  A well-tuned optimizer moves a weight matrix by roughly 1e-3 of its norm per step (the common
  rule of thumb, e.g. in Karpathy's "A Recipe for Training Neural Networks"). The detectors use
  wide margins around it:
  - too large: r at or above `LARGE_UPDATE_RATIO` (0.1, each step rewrites a tenth of the
    weight) sustained for `sustained_length(n)` points after warm-up: the learning rate is far
    too high for that parameter. Weight matrices only (`checks/weights.py` asks `is_matrix_like`):
    the rule of thumb is a matrix's, and a bias starts at 0 with a small norm, so an ordinary
    update is a large share of it (a sigmoid MLP under Momentum at 1.5 that learns moves its
    output bias by a third of its norm per step, its matrices by 0.5-2%). Judged on the finite ratios only: a NaN or Inf ratio is a
    weight that already went non-finite (the non-finite and divergence findings own that
    blow-up; calling it an update "inf of its norm" repeated it as a second, vaguer problem) or
    a first update of an all-zero tensor.
  - stopped: r at or below `FROZEN_UPDATE_RATIO` (1e-8, under the float32 relative resolution of
    6e-8, so the stored weight no longer changes) for `sustained_length(n, 0.1)` points, after
    it had clearly been moving (median ratio before >= `MOVING_UPDATE_RATIO`). Not reported while the learning rate is under `LR_IDLE_SHARE` of its
    peak (the end of a decay to zero is planned) -- the LR check owns that case.
* Without update ratios, a weight norm repeating exactly (relative change <= `FROZEN_NORM_CHANGE`)
  over the same number of consecutive logged points is taken as a stopped weight.
* drift: the rolling-median log10 weight norm moves `DRIFT_DECADES` (10x) away from its level
  at the end of warm-up and stays there for `sustained_length(n, 0.1)` points. Biases and
  normalisation gains start at 0 or 1 and legitimately move a lot; they are skipped.
* saturation (histograms): the share of values in the outer 5% of the histogram's range on
  either side reaches `SATURATED_EDGE_SHARE` (30%) and three times its post-warm-up level, for
  `sustained_length(n, 0.1)` points: values pile up against a bound (clipping, quantisation, or
  a weight pushed to the extremes of a saturating activation). A bell-shaped tensor keeps under
  1% there and a uniform initialisation about 10%.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tb_health_plugin.analysis.detectors.robust import rolling_median
from tb_health_plugin.analysis.detectors.robust_levels import (
    first_sustained_run,
    median_window,
    safe_log10,
    sustained_length,
    warmup_points,
)
from tb_health_plugin.analysis.event import Event

LARGE_UPDATE_RATIO = 0.1
FROZEN_UPDATE_RATIO = 1e-8
MOVING_UPDATE_RATIO = 1e-6  # "had been changing": a median ratio 100x above the frozen level
FROZEN_NORM_CHANGE = 1e-12
LR_IDLE_SHARE = 0.01
DRIFT_DECADES = 1.0
SATURATED_EDGE_SHARE = 0.3
SATURATION_GROWTH = 3.0
MIN_POINTS = 5
_NOT_A_MATRIX = re.compile(r"(bias|beta|gamma|norm|ln_|layernorm|\.ln\d*\.|scale)", re.IGNORECASE)


KIND = {
    "large_updates": "weight_updates",
    "stopped": "weight_updates",
    "drift": "weight_distribution",
    "saturation": "weight_distribution",
}


def _event(steps: np.ndarray | None, tag: str, what: str, index: int, end_index: int, evidence: dict[str, Any]) -> Event:
    """The problem `what` from point `index` to `end_index`, at the logged steps of those points
    (`steps`; None: the points' indices); `evidence["what"]` names it."""
    return Event(
        kind=KIND[what],
        severity="warning",
        step=int(index if steps is None else steps[index]),
        end_step=int(end_index if steps is None else steps[end_index]),
        tag=tag,
        message=f"weights.{what}",
        evidence=dict(evidence, what=what),
        advice=f"weights.advice.{what}",
    )


def is_matrix_like(param: str) -> bool:
    """False for biases and normalisation parameters, which start at 0/1 and move a lot."""
    return not _NOT_A_MATRIX.search(param)


def large_updates(ratios: np.ndarray, steps: np.ndarray | None = None, tag: str = "") -> Event | None:
    """Update ratios sustained at `LARGE_UPDATE_RATIO` or above after warm-up (see module doc).

    In every detector here `steps` are the logged steps of the points (default: their indices)
    and `tag` the series' tag."""
    ratios = np.asarray(ratios, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(ratios))
    ratios = ratios[finite]
    n = ratios.size
    if n < MIN_POINTS:
        return None
    warm = warmup_points(n)
    level = rolling_median(ratios, median_window(n), edges="mirror")
    run = first_sustained_run(level[warm:] >= LARGE_UPDATE_RATIO, sustained_length(n))
    if run is None:
        return None
    start, stop = run[0] + warm, run[1] + warm
    points = finite if steps is None else np.asarray(steps)[finite]
    return _event(
        points, tag, "large_updates", start, stop - 1, {"median_update_ratio": float(np.median(ratios[start:stop]))}
    )


def stopped_by_ratio(
    ratios: np.ndarray, lr_share: np.ndarray | None = None, steps: np.ndarray | None = None, tag: str = ""
) -> Event | None:
    """`lr_share`: the learning rate over its peak at the same points (None when not logged)."""
    ratios = np.asarray(ratios, dtype=np.float64)
    still = ratios <= FROZEN_UPDATE_RATIO
    return _stopped(still, ratios > FROZEN_UPDATE_RATIO, lr_share, {"update_ratio": ratios}, steps, tag)


def stopped_by_norm(
    norms: np.ndarray, lr_share: np.ndarray | None = None, steps: np.ndarray | None = None, tag: str = ""
) -> Event | None:
    norms = np.asarray(norms, dtype=np.float64)
    if norms.size < MIN_POINTS:
        return None
    change = np.abs(np.diff(norms)) / np.maximum(np.abs(norms[:-1]), 1e-30)
    still = np.concatenate(([False], change <= FROZEN_NORM_CHANGE))
    moving = np.concatenate(([False], change > FROZEN_NORM_CHANGE))
    return _stopped(still, moving, lr_share, {}, steps, tag)


def _stopped(still, moving, lr_share, extra, steps, tag) -> Event | None:
    n = still.size
    if n < MIN_POINTS or not moving.any():
        return None
    if lr_share is not None:
        still = still & ~(np.asarray(lr_share) < LR_IDLE_SHARE)
    first_move = int(np.argmax(moving))
    run = first_sustained_run(still[first_move:], sustained_length(n, share=0.1))
    if run is None:
        return None
    start, stop = run[0] + first_move, run[1] + first_move
    evidence = {"stopped_points": stop - start}
    if "update_ratio" in extra:
        before = float(np.nanmedian(extra["update_ratio"][first_move:start]))
        if not before >= MOVING_UPDATE_RATIO:  # it never clearly moved (e.g. behind vanishing gradients)
            return None
        evidence["update_ratio_before"] = before
    return _event(steps, tag, "stopped", start, stop - 1, evidence)


def drift(norms: np.ndarray, steps: np.ndarray | None = None, tag: str = "") -> Event | None:
    norms = np.asarray(norms, dtype=np.float64)
    n = norms.size
    if n < MIN_POINTS:
        return None
    level = rolling_median(safe_log10(norms), median_window(n), edges="mirror")
    warm = warmup_points(n)
    base = level[min(warm, n - 1)]
    if not np.isfinite(base):
        return None
    run = first_sustained_run(np.abs(level[warm:] - base) >= DRIFT_DECADES, sustained_length(n, share=0.1))
    if run is None:
        return None
    start, stop = run[0] + warm, run[1] + warm
    factor = 10.0 ** float(np.nanmedian(level[start:stop]) - base)
    return _event(
        steps,
        tag,
        "drift",
        start,
        stop - 1,
        {"norm_before": 10.0**base, "norm_after": float(np.nanmedian(norms[start:stop])), "factor": factor},
    )


def saturation(edge_shares: np.ndarray, steps: np.ndarray | None = None, tag: str = "") -> Event | None:
    shares = np.asarray(edge_shares, dtype=np.float64)
    n = shares.size
    if n < MIN_POINTS:
        return None
    warm = warmup_points(n)
    base = float(np.nanmedian(shares[: warm + 1]))
    limit = max(SATURATED_EDGE_SHARE, SATURATION_GROWTH * base)
    level = rolling_median(shares, median_window(n), edges="mirror")
    run = first_sustained_run(level >= limit, sustained_length(n, share=0.1))
    if run is None:
        return None
    start, stop = run
    return _event(
        steps,
        tag,
        "saturation",
        start,
        stop - 1,
        {"edge_share_before": base, "edge_share": float(np.nanmedian(shares[start:stop])), "limit": limit},
    )
