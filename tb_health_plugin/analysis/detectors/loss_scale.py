"""Dynamic loss scaling: the healthy saw-tooth against collapse, steady decline and overflow storms.

A dynamic loss-scale manager halves the scale on every overflowing step (that step's update is
skipped) and doubles it after `scale_window` clean steps (1000 in MindSpore's
`DynamicLossScaleManager` and in Megatron, 2000 in PyTorch's GradScaler). Healthy fp16 training
therefore shows a calibration phase (halvings from the initial 2^16..2^32 down to a level that
fits), then a saw-tooth around that level with about one overflow per window: a 0.05-0.1% skip
rate. Working on log2(scale):

* overflows: the share of points whose logged overflow flag is set, else estimated from the scale
  itself as the number of halvings between logged points per step, at most one per step (an
  overflowing step halves the scale once; a bigger fall cannot mean more overflowing steps).
* the search: every dynamic scaler starts high (2^16 in PyTorch and DeepSpeed, 2^24 in
  MindSpore, 2^32 in Megatron) and halves until the gradients fit, at first on every step, then
  at growing intervals as overflows get rarer; it regrows only after a whole window of clean
  steps. The search ends at the first regrowth, or at the first halving followed by
  `SEARCH_HOLD_STEPS` (100) steps without one: a scale that still overflows on 3% or more of its
  steps survives 100 steps without an overflow with probability 0.97^100 < 5%, so after such a
  hold the scale fits and further halvings are the scaler's normal probing or a fault. The
  halvings of the search, however many, are normal and are neither counted nor a decline.
* overflow rate: from the first overflow whose next `ONSET_WINDOW_SHARE` of points already skip
  `OVERFLOW_RATE_WARNING` (2%: 20x the rate a 1000-step window produces) of their steps, the
  rate to the end of the run stays above that rate with at least `MIN_OVERFLOWS`; critical
  above `OVERFLOW_RATE_CRITICAL` (20% of steps skipped).
* steady decline: after the search and after the last regrowth the scale keeps falling, at least
  `DECLINE_HALVINGS` halvings spread over `DECLINE_MIN_SHARE` of the run, and the level fell
  `DECLINE_HALVINGS` below where the search left it: the manager cannot find a stable scale.
* collapse: a scale that was higher reaches `MIN_SCALE` (1, the managers' default floor) or
  below: gradients overflow even unscaled, and fp16 gradients underflow (critical).
* floor: with logged overflow flags, the scale sits at its lowest level (a floor the scaler was
  configured with, above 1) while `MIN_OVERFLOWS` or more of the steps logged there overflow, at
  `OVERFLOW_RATE_WARNING` of them or more: the scaler would halve but may not (warning). In a
  healthy saw-tooth the lowest level is left by regrowth and sees about one overflow per window.
A scale that never changes is a static scale (often 1 for bf16) and is not analysed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tb_health_plugin.analysis.event import Event

OVERFLOW_RATE_WARNING = 0.02
OVERFLOW_RATE_CRITICAL = 0.2
MIN_OVERFLOWS = 5
DECLINE_HALVINGS = 4
DECLINE_MIN_SHARE = 0.2
MIN_SCALE = 1.0
ONSET_WINDOW_SHARE = 0.05
MIN_POINTS = 5
SEARCH_HOLD_STEPS = 100


class _Problem(NamedTuple):
    """A problem from point `index` to `end_index`, before `_event` places it at its steps."""

    what: str  # "overflow_rate", "decline", "collapse", "floor"
    severity: str
    index: int
    end_index: int
    evidence: dict[str, Any]


def _event(problem: _Problem, steps: np.ndarray, tag: str) -> Event:
    return Event(
        kind="loss_scale",
        severity=problem.severity,
        step=int(steps[problem.index]),
        end_step=int(steps[problem.end_index]),
        tag=tag,
        message=f"loss_scale.{problem.what}",
        evidence=dict(problem.evidence, what=problem.what),
        advice=f"loss_scale.advice.{problem.what}",
    )


def calibration_end(log_scale: np.ndarray) -> int:
    """Index of the first regrowth of the scale (the series length if it never grows)."""
    grow = np.flatnonzero(np.diff(log_scale) > 0)
    return int(grow[0]) + 1 if grow.size else log_scale.size


def analyze_loss_scale(
    steps: np.ndarray, scale: np.ndarray, overflow: tuple[np.ndarray, np.ndarray] | None = None, tag: str = ""
) -> list[Event]:
    """Problems of one loss-scale series (see module doc), `evidence["what"]` naming each.

    `overflow`: (steps, 0/1 flags) when the run logs its overflow flag (a per-step sample is
    enough: the rate is the share of flagged points); None to estimate from the halvings.
    `tag`: the series' tag.
    """
    steps = np.asarray(steps, dtype=np.int64)
    return [_event(problem, steps, tag) for problem in _problems(steps, scale, overflow)]


def _problems(steps: np.ndarray, scale: np.ndarray, overflow: tuple[np.ndarray, np.ndarray] | None) -> list[_Problem]:
    scale = np.asarray(scale, dtype=np.float64)
    ok = np.isfinite(scale) & (scale > 0)
    collapsed_to_zero = bool(np.any(np.isfinite(scale) & (scale <= 0)))
    if ok.sum() < MIN_POINTS or (np.ptp(scale[ok]) == 0 and not collapsed_to_zero):
        return []
    log_scale = np.full(scale.shape, np.nan)
    log_scale[ok] = np.log2(scale[ok])
    log_scale = _forward_fill(log_scale)
    problems: list[_Problem] = []
    # overflows are counted after the search (its halvings are what every dynamic scaler does):
    # from the first regrowth, or without one from the first hold of the scale
    calib = calibration_end(log_scale)
    counted_from = min(calib if calib < scale.size else search_end(steps, log_scale), scale.size - 1)
    overflows, rate, first_overflow = _overflow_rate(steps, log_scale, counted_from, overflow)
    if overflows >= MIN_OVERFLOWS and rate >= OVERFLOW_RATE_WARNING and first_overflow is not None:
        problems.append(
            _Problem(
                "overflow_rate",
                "critical" if rate >= OVERFLOW_RATE_CRITICAL else "warning",
                min(first_overflow, scale.size - 1),
                scale.size - 1,
                {"overflows": overflows, "steps": int(steps[-1] - steps[counted_from]), "skip_rate": rate},
            )
        )
    top = float(np.max(log_scale))
    at_min = log_scale <= np.log2(MIN_SCALE)
    if collapsed_to_zero or (at_min.any() and top > np.log2(MIN_SCALE)):
        index = int(np.argmax(~ok)) if collapsed_to_zero else int(np.argmax(at_min))
        problems.append(
            _Problem(
                "collapse",
                "critical",
                index,
                scale.size - 1,
                {"min_scale": float(2.0 ** np.min(log_scale)), "max_scale": 2.0**top},
            )
        )
        return problems
    if overflow is not None:
        floor = _stuck_at_floor(steps, log_scale, counted_from, overflow)
        if floor is not None:
            problems.append(floor)
    decline = _steady_decline(steps, log_scale, counted_from)
    if decline is not None:
        problems.append(decline)
    return problems


def search_end(steps: np.ndarray, log_scale: np.ndarray) -> int:
    """Index where the initial search of the scale ends (see module doc): the first regrowth, or
    the first halving followed by `SEARCH_HOLD_STEPS` steps without a halving (0 when the scale
    does not start by halving)."""
    calib = calibration_end(log_scale)
    drops = np.flatnonzero(np.diff(log_scale) < 0) + 1
    drops = drops[drops < calib]
    if drops.size == 0 or steps[drops[0]] - steps[0] > SEARCH_HOLD_STEPS:
        return 0
    following = np.append(steps[drops[1:]], steps[min(calib, steps.size - 1)] if calib < steps.size else np.iinfo(np.int64).max)
    held = np.flatnonzero(following - steps[drops] >= SEARCH_HOLD_STEPS)
    end = int(drops[held[0]]) if held.size else int(drops[-1])
    return min(end, calib)


def _stuck_at_floor(steps, log_scale, counted_from, overflow) -> _Problem | None:
    """Overflows keep coming at the lowest level after the search and the scale does not go lower."""
    low = float(np.min(log_scale[counted_from:]))
    if low <= np.log2(MIN_SCALE):
        return None  # a collapse, reported as such
    flag_steps, flags = (np.asarray(a) for a in overflow)
    positions = np.clip(np.searchsorted(steps, flag_steps), 0, steps.size - 1)
    at_floor = (flag_steps >= steps[counted_from]) & (log_scale[positions] <= low)
    overflows = int(np.sum(flags[at_floor] > 0))
    points = int(at_floor.sum())
    if overflows < MIN_OVERFLOWS or overflows < OVERFLOW_RATE_WARNING * points:
        return None
    first = int(positions[np.argmax(at_floor & (flags > 0))])
    return _Problem(
        "floor",
        "warning",
        first,
        steps.size - 1,
        {"floor_scale": float(2.0**low), "overflows_at_floor": overflows, "skip_rate_at_floor": overflows / points},
    )


def _overflow_rate(steps, log_scale, counted_from, overflow) -> tuple[int, float, int | None]:
    """(overflows, overflows per step, index where the high rate starts) after `counted_from`.

    The start is the first overflow from which the rate over the next `ONSET_WINDOW_SHARE` of
    the points reaches the warning rate; count and rate are those from that start to the end.
    """
    if overflow is not None:
        flag_steps, flags = (np.asarray(a) for a in overflow)
        after = flag_steps > steps[counted_from]
        events = (flags[after] > 0).astype(np.float64)
        exposure = np.ones(events.size)  # flags are a per-step sample: one step per point
        positions = np.searchsorted(steps, flag_steps[after])
    else:
        exposure = np.diff(steps)[counted_from:].astype(np.float64)
        halvings = np.round(np.maximum(0.0, -np.diff(log_scale)))[counted_from:]
        # a step overflows at most once: a fall of more halvings than steps (a scale factor
        # above 2, a scale reset or underflowing to ~0) still means at most every step overflowed
        events = np.minimum(halvings, exposure)
        positions = np.arange(counted_from + 1, steps.size)
    if events.size == 0:
        return 0, 0.0, None
    width = max(10, int(np.ceil(ONSET_WINDOW_SHARE * events.size)))
    forward_events = _forward_sums(events, width)
    forward_exposure = _forward_sums(exposure, width)
    high = (events > 0) & (forward_events / np.maximum(forward_exposure, 1.0) >= OVERFLOW_RATE_WARNING)
    if not high.any():
        return int(events.sum()), float(events.sum() / max(1.0, exposure.sum())), None
    onset = int(np.argmax(high))
    tail_rate = float(events[onset:].sum() / max(1.0, exposure[onset:].sum()))
    return int(events[onset:].sum()), tail_rate, min(int(positions[onset]), steps.size - 1)


def _forward_sums(values: np.ndarray, width: int) -> np.ndarray:
    """Sum of values[i : i + width] for every i (shorter at the end)."""
    cumulative = np.concatenate(([0.0], np.cumsum(values)))
    ends = np.minimum(np.arange(values.size) + width, values.size)
    return cumulative[ends] - cumulative[: values.size]


def _steady_decline(steps, log_scale, counted_from) -> _Problem | None:
    grows = np.flatnonzero(np.diff(log_scale) > 0)
    last_growth = max(int(grows[-1]) + 1 if grows.size else 0, counted_from)
    tail = log_scale[last_growth:]
    if tail.size < 2:
        return None
    fell = float(tail[0] - tail[-1])
    drop_points = np.flatnonzero(np.diff(tail) < 0)
    if fell < DECLINE_HALVINGS or drop_points.size < 2:
        return None
    first = last_growth + int(drop_points[0]) + 1
    last = last_growth + int(drop_points[-1]) + 1
    run_span = max(1, int(steps[-1] - steps[0]))
    if (steps[last] - steps[first]) < DECLINE_MIN_SHARE * run_span:
        return None
    return _Problem(
        "decline",
        "warning",
        first,
        log_scale.size - 1,
        {
            "scale_from": float(2.0 ** tail[0]),
            "scale_to": float(2.0 ** tail[-1]),
            "halvings": int(round(fell)),
            "regrowths": int(grows.size),
        },
    )


def _forward_fill(values: np.ndarray) -> np.ndarray:
    """NaN replaced by the last valid value before it (leading NaN by the first valid one)."""
    valid = ~np.isnan(values)
    if not valid.any():
        return values.copy()
    index = np.where(valid, np.arange(values.size), 0)
    np.maximum.accumulate(index, out=index)
    filled = values[index]
    filled[: int(np.argmax(valid))] = values[int(np.argmax(valid))]
    return filled
