"""Exploding and vanishing gradients from one gradient-norm series (global or one layer's).

Method (all on log10 of the norm, so "orders of magnitude" is a difference of levels):

* level = rolling median of log10(norm) over `median_window(n)` points; non-finite norms count as
  +inf, so a stretch of overflowed norms raises the level while one isolated overflow does not.
* The first `warmup_points(n)` points never form a baseline: large norms right after
  initialisation are normal and usually fall quickly.
* Exploding: the level stays at least `EXPLODE_DECADES` (100x) above the *running minimum* of the
  post-warm-up level for `sustained_length(n)` points. Measuring against the running minimum
  means norms that start high and settle never alarm, while growth at any later time does.
  The baseline is never below where the norm stood once warm-up was over (the median of its
  first `CLIMB_POINTS` finite values after the warm-up points, which may hold the large norms
  of the untrained network): a norm that fell by decades and comes back towards that scale
  recovers, it does not explode. Zoo runs did that while their loss stood still: every unit
  saturated (1e-28, then 1e-6, against a start of 0.2), a collapse to 1e-11 and back to 1e-9, a
  classifier's hard batches taking a converged norm from 1e-3 back to its start of 1; each was
  a warning "rose 1e3-1e22x above its earlier level". On the 880 zoo runs of dev, holdout and
  seen to seen6 and the 136 of 44444 this removed the false exploding warnings of 9 of 12 runs
  (the other three are one layer's norm: `checks/gradients.py` judges those), and lost none of
  the 10 labelled runs found, nor any of the benchmark's 30 synthetic and MindSpore exploding
  runs. (Taken from the first points, warm-up included, it lost 3 of dev's 19, synthetic runs
  whose generator starts most norms 10-1000x above where they settle.) The zoo's label (rule 3
  of `bench/detection/zoo_labels.py`) counts from where the run started, too. In effect the
  baseline is that post-warm-up level: the running minimum counts only while it stays above
  it, which ends once the level comes down to that value. Growth on the way up right after warm-up is
  therefore counted from a little higher than before: two labelled explosions were dated one
  logged point later (zoo_dev_066, zoo_seen3_095) and one, 10^4x above its running minimum
  but less above that level, is a warning now instead of critical (zoo_dev_105).
  Critical when the excess reaches `CRITICAL_EXPLODE_DECADES` (10^4x) or the norm overflows.
  The reported onset walks back from there while the logged norm is still `ONSET_NOISE_MULTIPLE`
  robust sigmas (1.4826 MAD of the residuals around the level) and at least 2x above the typical
  (median) level before it.
  Growth the loss explains is not exploding: near zero loss a cross-entropy gradient scales with
  the loss (its gradient on the logits is p - y), so a classifier that converged to 1e-7 has
  tiny norms that come back by decades on its hard batches. When the loss (if given) rose, from
  its level (the same rolling median) where the norm had its baseline to its median over the
  norm's excursion, by no less than `LOSS_EXPLAINS_DECADES` short of the norm's rise, the norm
  only followed the loss (the loss detectors report that), as in the vanishing rule below.
* Growth while learning is not exploding either. A norm rising by decades while the loss keeps
  falling is what training looks like in several healthy regimes: leaving the flat start or a
  plateau (saddle escape: the gradient grows as the weights leave the small-gradient region,
  Saxe et al. 2014, Dauphin et al. 2014; a deep sigmoid stack's first layer comes back from
  1e-4 as the signal starts to flow), or the steady growth of the norm through training that
  Goodfellow, Bengio & Courville (Deep Learning, 2016, sec. 8.2.1, fig. 8.1) show for a
  classifier whose error keeps falling. Exploding gradients (Pascanu et al. 2013) do harm
  through the updates they make: the loss jumps or stops improving. So when the loss (if
  given) over the norm's excursion is lower than over the `median_window(n)` points before its
  onset, by at least `LEARNING_MIN_DROP` (5%, the change under which the stall detector calls
  a run stuck: a learning run gains more) and significantly (one-sided Mann-Whitney U,
  p < `LEARNING_P`; rank-based, so skewed batch noise and the loss's scale do not matter), the
  run was learning through the rise and it is not reported. (Consecutive losses are correlated,
  so the test's p understates the chance of a wandering loss looking lower; the 5% floor is
  what keeps a flat loss from passing.) A non-finite loss in the excursion
  counts as worse than any finite one. The zoo's labels (`bench/detection/zoo_labels.py`,
  rule 3) apply the same test.
* Climb before a blow-up: a run that goes non-finite within a few points of starting never
  gets a post-warm-up baseline, yet its norm climbing 100x before the NaN is the cause of the
  blow-up. So when the norm turns non-finite, the median of the last `CLIMB_POINTS` finite
  norms before it standing `EXPLODE_DECADES` above the median of the first `CLIMB_POINTS`
  (where the run started, medians of 3 so that one freak batch cannot make it) is exploding,
  critical (it overflowed into the NaN).
* Vanishing, relative: the level stays `VANISH_DECADES` (1000x) below the running maximum of the
  post-warm-up level, *and* the loss (when given) fell by at least `LOSS_EXPLAINS_DECADES` less
  than the norm did. Near a minimum the gradient shrinks with the loss; a gradient that collapses
  while the loss does not is the symptom. The running maximum is a healthy level: points whose
  loss overflowed (`overflowed`) are left out of it (their level is taken over the other points
  alone). A float16 run whose loss was Inf at a few early steps had norms of 27-1181 there
  and mostly 0.07-1.1 elsewhere from step 1 (3-11 on a few hard batches); logged every 5th
  step, a 3-point median of two such norms made a "peak" of 174 and a collapse of 3 decades
  that the every-step log did not show. They stay in the level the collapse is judged on: a
  diverged run whose loss is Inf at most steps keeps its real norms there, where the few
  finite-loss steps (a loss and a norm of exactly 0) are no sample of them.
* Vanishing, absolute floor: the level stays at or below `ABSOLUTE_FLOOR` (1e-8). Justified
  because an fp32 weight of magnitude 1e-2 has a resolution (ulp) near 1e-9: with any usual
  learning rate (<= 1e-1) an update from such a gradient no longer changes the weight, and with
  Adam it falls under the default epsilon (1e-8) and is scaled to nothing. Exactly zero norms
  (dead ReLUs, a detached graph) are below the floor too. Not while the loss over that stretch
  has fit its data (`stall.converged`: its median at or under 1% of where it started): the
  gradient of a loss at its minimum is zero, and a float16 classifier whose logits saturate
  logs a loss of exactly 0 and a gradient norm of exactly 0 at the same steps (zoo runs of the
  sealed seed 61591 were "vanishing" there while their loss sat at 0.000-0.03 of a start of
  2.1-2.5); the zoo labels global vanishing only while the loss stays above half its start.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tb_health_plugin.analysis.detectors.rank_sum import mann_whitney_p
from tb_health_plugin.analysis.detectors.robust import rolling_median
from tb_health_plugin.analysis.detectors.robust_levels import (
    first_sustained_run,
    median_window,
    safe_log10,
    sustained_length,
    warmup_points,
)
from tb_health_plugin.analysis.detectors.stall import START_POINTS, converged, start_level
from tb_health_plugin.analysis.event import Event

EXPLODE_DECADES = 2.0
CRITICAL_EXPLODE_DECADES = 4.0
ONSET_NOISE_MULTIPLE = 3.0  # the onset: where the level first stands 3 noise sigmas above baseline
ONSET_MIN_DECADES = 0.3  # ... and at least 2x
VANISH_DECADES = 3.0
LOSS_EXPLAINS_DECADES = 2.0
LEARNING_MIN_DROP = 0.05  # the loss fell by more than the 5% a stalled run may wander
LEARNING_P = 0.01  # ... with 1% false evidence of learning for a loss that did not fall
ABSOLUTE_FLOOR = 1e-8
MIN_POINTS = 8
CLIMB_POINTS = 3


class _Found(NamedTuple):
    """A problem from point `index` to `end_index` of the series, before `_event` places it at its steps."""

    kind: str  # "exploding_gradients" or "vanishing_gradients"
    severity: str
    index: int
    end_index: int
    evidence: dict[str, Any]


def _event(found: _Found | None, steps: np.ndarray | None, tag: str) -> Event | None:
    """The event at the logged steps of its points (`steps`; None: the points' indices), with the
    catalogue ids of a whole-model norm; checks of one layer or of depth replace them."""
    if found is None:
        return None
    at = (lambda i: int(i)) if steps is None else (lambda i: int(steps[i]))
    direction = "exploding" if found.kind == "exploding_gradients" else "vanishing"
    return Event(kind=found.kind, severity=found.severity, step=at(found.index), end_step=at(found.end_index),
                 tag=tag, message=f"gradients.global.{direction}", evidence=found.evidence,
                 advice=f"gradients.advice.{direction}")


def _overflow_as_inf(values: np.ndarray) -> np.ndarray:
    logs = safe_log10(values)
    logs[~np.isfinite(np.asarray(values, dtype=np.float64))] = np.inf
    zero = np.asarray(values) == 0
    logs[zero] = -np.inf
    return logs


def exploding(
    values: np.ndarray, loss: np.ndarray | None = None, steps: np.ndarray | None = None, tag: str = ""
) -> Event | None:
    """Sustained growth of the norm far above its own post-warm-up baseline, or its climb right
    before it turns non-finite (see module doc).

    `loss`, when given, must be aligned with `values` point by point (NaN where missing);
    `steps`: the logged step of each point (default: its index); `tag`: the series' tag.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.size
    if n < MIN_POINTS:
        return None
    return _event(_sustained_growth(values, loss) or _climb_before_blow_up(values), steps, tag)


def _climb_before_blow_up(values: np.ndarray) -> _Found | None:
    logs = _overflow_as_inf(values)
    nonfinite = ~np.isfinite(logs)
    if not nonfinite.any():
        return None
    blow_up = int(np.argmax(nonfinite))
    before = np.flatnonzero(np.isfinite(logs[:blow_up]))
    if before.size < 2 * CLIMB_POINTS:
        return None
    start = opening_level(logs)
    last = float(np.median(logs[before[-CLIMB_POINTS:]]))
    if last - start < EXPLODE_DECADES:
        return None
    below = np.flatnonzero(logs[before] - start < ONSET_MIN_DECADES)  # the climb: the points after these
    onset = int(before[below[-1] + 1]) if below.size else int(before[0])
    peak = float(np.max(logs[before]))
    return _Found(
        kind="exploding_gradients",
        severity="critical",
        index=onset,
        end_index=blow_up,
        evidence={
            "baseline_norm": 10.0**start,
            "peak_norm": 10.0**peak,
            "growth_factor": 10.0 ** (peak - start),
            "overflowed": True,
        },
    )


def opening_level(logs: np.ndarray) -> float | None:
    """Where a log10 norm series starts: the median of its first `CLIMB_POINTS` finite values
    (so one freak batch cannot set it), None when it has none."""
    finite = logs[np.isfinite(logs)][:CLIMB_POINTS]
    return float(np.median(finite)) if finite.size else None


def _sustained_growth(values: np.ndarray, loss: np.ndarray | None) -> _Found | None:
    n = values.size
    logs = _overflow_as_inf(values)
    level = rolling_median(logs, median_window(n), edges="mirror")
    warm = warmup_points(n)
    finite_level = np.where(np.isfinite(level), level, np.nan)
    post = finite_level[warm:]
    if np.all(np.isnan(post)):
        return None
    baseline = np.fmin.accumulate(post)  # running minimum, NaN-skipping
    settled = opening_level(logs[warm:])
    if settled is not None:  # never below where the norm stood after warm-up (module doc)
        baseline = np.fmax(baseline, settled)
    excess = level[warm:] - baseline
    run = first_sustained_run(excess >= EXPLODE_DECADES, sustained_length(n))
    if run is None:
        return None
    start, stop = run[0] + warm, run[1] + warm
    base = float(baseline[run[0]])
    head = post[: run[0] + 1]  # no finite level before the run: the baseline is the opening level
    base_index = warm + (int(np.nanargmin(head)) if np.isfinite(head).any() else 0)
    loss_rise = _loss_level_rise(loss, base_index, start, stop)
    if loss_rise is not None and float(np.nanmedian(excess[run[0] : run[1]])) - loss_rise < LOSS_EXPLAINS_DECADES:
        return None  # the norm came back with the loss from a converged low
    if not np.any(np.isfinite(logs[warm:stop]) & (logs[warm:stop] - base >= EXPLODE_DECADES)):
        return None  # only non-finite values: a NaN problem, reported as `nonfinite`
    # the onset: walk back while the level still stands clearly above the baseline noise
    finite = np.isfinite(logs) & np.isfinite(level)
    residual = (logs - np.where(finite, level, 0.0))[warm:][finite[warm:]]
    noise = 1.4826 * float(np.median(np.abs(residual - np.median(residual)))) if residual.size else 0.0
    rise = max(ONSET_NOISE_MULTIPLE * noise, ONSET_MIN_DECADES)
    before = finite_level[warm:start]
    typical = float(np.nanmedian(before)) if np.isfinite(before).any() else base
    onset = start  # walked back on logged values: the centred level leaks ahead of time
    while onset - 1 >= warm and logs[onset - 1] - typical >= rise:
        onset -= 1
    if loss is not None and loss_fell_through(loss, onset, stop, median_window(n)):
        return None  # the run was learning through the rise (module doc)
    window = logs[onset:stop]
    peak = (
        float(np.nanmax(np.where(np.isinf(window) & (window > 0), np.nan, window)))
        if np.any(np.isfinite(window))
        else np.inf
    )
    overflowed = bool(np.any(np.isposinf(window)))
    excess_decades = peak - base if np.isfinite(peak) else float(np.nanmax(excess[run[0] : run[1]]))
    severity = "critical" if overflowed or excess_decades >= CRITICAL_EXPLODE_DECADES else "warning"
    return _Found(
        kind="exploding_gradients",
        severity=severity,
        index=onset,
        end_index=stop - 1,
        evidence={
            "baseline_norm": 10.0**base,
            "peak_norm": 10.0**peak if np.isfinite(peak) else float("inf"),
            "growth_factor": 10.0 ** min(excess_decades, 300.0)
            if np.isfinite(excess_decades)
            else float("inf"),
            "overflowed": overflowed,
        },
    )


def vanishing(
    values: np.ndarray, loss: np.ndarray | None = None, steps: np.ndarray | None = None, tag: str = "",
    overflowed: np.ndarray | None = None,
) -> Event | None:
    """A norm under the absolute floor, or collapsing far more than the loss (see module doc).

    `loss`, when given, must be aligned with `values` point by point (NaN where missing);
    `steps` and `tag` as for `exploding`; `overflowed`: per point, whether the loss logged there
    was NaN or Inf (those points set no baseline).
    """
    return _event(_vanishing(values, loss, overflowed), steps, tag)


def _healthy_level(logs: np.ndarray, overflowed: np.ndarray | None, level: np.ndarray) -> np.ndarray:
    """The level over the points whose loss did not overflow, NaN at the others."""
    if overflowed is None or not np.any(overflowed):
        return level
    healthy = np.flatnonzero(~np.asarray(overflowed, dtype=bool))
    out = np.full(logs.size, np.nan)
    if healthy.size:
        out[healthy] = rolling_median(logs[healthy], median_window(healthy.size), edges="mirror")
    return out


def _vanishing(values: np.ndarray, loss: np.ndarray | None, overflowed: np.ndarray | None = None) -> _Found | None:
    values = np.asarray(values, dtype=np.float64)
    n = values.size
    if n < MIN_POINTS:
        return None
    logs = safe_log10(values)
    logs[values == 0] = -np.inf
    level = rolling_median(logs, median_window(n), edges="mirror")
    warm = warmup_points(n)
    min_length = sustained_length(n, share=0.1)
    floor_run = first_sustained_run(level <= np.log10(ABSOLUTE_FLOOR), min_length)
    if floor_run is not None and _loss_fitted(loss, *floor_run):
        return None  # a loss at its minimum has a zero gradient: convergence (module doc)
    if floor_run is not None:
        start, stop = floor_run
        while start - 1 >= 0 and logs[start - 1] <= np.log10(ABSOLUTE_FLOOR):
            start -= 1
        return _Found(
            kind="vanishing_gradients",
            severity="critical",
            index=start,
            end_index=stop - 1,
            evidence={
                "median_norm": _median_norm(values[start:stop]),
                "floor": ABSOLUTE_FLOOR,
                "zero_share": float(np.mean(values[start:stop] == 0)),
            },
        )
    baseline = _healthy_level(logs, overflowed, level)
    post = np.where(np.isfinite(baseline), baseline, np.nan)[warm:]
    if np.all(np.isnan(post)):
        return None
    peak = np.fmax.accumulate(post)
    drop = peak - level[warm:]
    run = first_sustained_run(drop >= VANISH_DECADES, min_length)
    if run is None:
        return None
    start, stop = run[0] + warm, run[1] + warm
    peak_index = warm + int(np.nanargmax(post[: run[0] + 1]))
    norm_drop = float(np.nanmedian(drop[run[0] : run[1]]))
    loss_drop = _loss_drop_decades(loss, peak_index, start, stop)
    if loss_drop is not None and norm_drop - loss_drop < LOSS_EXPLAINS_DECADES:
        return None
    return _Found(
        kind="vanishing_gradients",
        severity="warning",
        index=start,
        end_index=stop - 1,
        evidence={
            "baseline_norm": 10.0 ** float(peak[run[0]]),
            "median_norm": _median_norm(values[start:stop]),
            "collapse_factor": 10.0**norm_drop,
            "loss_drop_factor": None if loss_drop is None else 10.0**loss_drop,
        },
    )


def _loss_fitted(loss: np.ndarray | None, start: int, stop: int) -> bool:
    """Whether the loss over points [start, stop) stands in the converged regime of
    `stall.converged`: at most 1% of where it started (`stall.start_level` of its finite
    values), never below zero."""
    if loss is None:
        return False
    loss = np.asarray(loss, dtype=np.float64)
    finite = loss[np.isfinite(loss)]
    during = loss[start:stop]
    during = during[np.isfinite(during)]
    if finite.size < START_POINTS or not during.size:
        return False
    return converged(float(np.median(during)), start_level(finite), finite)


def _median_norm(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else float("nan")


def _loss_level_rise(loss: np.ndarray | None, base_index: int, start: int, stop: int) -> float | None:
    """Decades the loss rose from its level (rolling median, as the norm's) at the norm's baseline
    to its median over the norm's excursion."""
    if loss is None:
        return None
    logs = safe_log10(np.asarray(loss, dtype=np.float64))
    if np.all(np.isnan(logs)) or np.all(np.isnan(logs[start:stop])):
        return None
    level = rolling_median(logs, median_window(logs.size), edges="mirror")
    return float(np.nanmedian(logs[start:stop]) - level[base_index])


def loss_fell_through(loss: np.ndarray, onset: int, stop: int, width: int) -> bool:
    """Whether the loss over points [onset, stop) is lower than over the `width` points before
    `onset`, by at least `LEARNING_MIN_DROP` of the size of its median there and significantly (one-sided
    Mann-Whitney U, p < `LEARNING_P`). NaN points are missing; +-inf counts as worse than any
    finite loss (a loss that overflowed did not learn)."""
    loss = np.asarray(loss, dtype=np.float64)
    before = loss[max(0, onset - width) : onset]
    during = loss[onset:stop]
    before, during = before[~np.isnan(before)], during[~np.isnan(during)]
    if not before.size or not during.size or np.isinf(during).any() or np.isinf(before).all():
        return False
    before = np.where(np.isinf(before), np.inf, before)
    reference = float(np.median(before[np.isfinite(before)]))
    if reference - float(np.median(during)) < LEARNING_MIN_DROP * abs(reference):
        return False
    return bool(mann_whitney_p(during, before, "less") < LEARNING_P)


def _loss_drop_decades(loss: np.ndarray | None, peak_index: int, start: int, stop: int) -> float | None:
    if loss is None:
        return None
    loss = np.asarray(loss, dtype=np.float64)
    before = safe_log10(loss[max(0, peak_index - 2) : peak_index + 3])
    after = safe_log10(loss[start:stop])
    if np.all(np.isnan(before)) or np.all(np.isnan(after)):
        return None
    return float(np.nanmedian(before) - np.nanmedian(after))
