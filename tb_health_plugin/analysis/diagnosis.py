"""The likely cause of each finding, from what the other series did at the same steps.

A finding says what went wrong in one series; this module looks at the others around its step
and adds the most likely cause to its evidence (`cause`: a code of `contract.CAUSES`,
`related`: the numbers it rests on). It writes no text: the message catalogue
(`tb_health_plugin/i18n`) says the cause and what to try, in the report's language. Each kind's
module (`analysis/kinds/`) names the function below that diagnoses it. The causes, by kind:

* loss spike / divergence: a gradient-norm spike together with a loss-scale drop or an overflow
  flag -> mixed-precision overflow; a learning-rate rise at that step -> the schedule; a loss
  spike whose gradient norm spiked at one point, falling `SPIKE_FACTOR`-fold from its peak
  within the next `SETTLE_POINTS` gradient points -> one bad batch (a batch that yields a huge
  loss also yields huge gradients, and once it has passed the gradients are as before, whereas
  an update too large for the loss surface leaves the weights, and so the gradients, disturbed
  for a while). The loss itself may stay raised for a few windows after a bad batch (its one
  large update moved the weights), so the test is on the gradients' peak, not on the length
  of the loss spike; any other
  gradient-norm spike -> an unstable update; gradients that stayed normal -> the data of that
  step (a large loss on a batch normally comes with a large gradient; when it does not, the
  batch itself is odd, e.g. mislabelled or corrupt), said only of a loss spike: a divergence
  is not one batch. A divergence is judged over its whole span, from its onset to
  its end (or to the last logged step when it has not ended), not at its first step alone:
  a slow rise whose gradients grow along the way had growing gradients.
* a finding that is part of another one (`part_of` in its evidence, such as the non-finite end
  of a divergence) gets no cause of its own: the finding it belongs to carries it.
* non-finite values: which series went NaN/Inf first (a parameter's or the global gradient norm
  before the loss -> the backward pass overflowed; the loss first or at the same step -> the
  forward pass or the loss itself). A loss that turns non-finite for good is a divergence,
  which carries that cause when the gradients went first (otherwise the loss-event causes).
* divergence or non-finite values after exploding gradients: the explosion.
* exploding gradients: at a learning-rate rise, or as the rate reaches its warm-up peak: the
  rate at `PEAK_SHARE` (90%) of its peak or more, and the rise starting within the run's first
  transient (`schedule.default_warmup_end`: a tenth of the steps the rate's log covers, plus one
  logging interval) after the rate first got there. A rate that has been at its peak for
  most of the run is no news at the step the norm rose: a constant rate of 0.13 whose layer-0
  norm rose 19,000x at step 370 of 438 was said to have blown up "as the rate reached its peak",
  which it reached at step 1. Such a rise gets no cause line rather than a wrong one.
* vanishing gradients and stalls: a learning rate at zero or its floor, exactly-zero gradients.

A "spike" of a related series is a window maximum `SPIKE_FACTOR` (3x) above the median of the
`BASELINE_POINTS` points before it; the window is the finding's steps widened by one logging
interval of that series on each side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tb_health_plugin.analysis.detectors.schedule import default_warmup_end
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import ScalarSeries

SPIKE_FACTOR = 3.0
BASELINE_POINTS = 20
LR_IDLE_SHARE = 0.01
PEAK_SHARE = 0.9  # a rate this close to its peak is "at its peak" (exploding gradients' cause)
SETTLE_POINTS = 2

Diagnose = Callable[[Event, list[Event], RunSignals], tuple[str | None, dict[str, Any]]]


def explain(findings: list[Event], signals: RunSignals, diagnosers: dict[str, Diagnose]) -> list[Event]:
    """The findings with their most likely cause in the evidence (`cause`: a code of
    `contract.CAUSES`, `related`: the figures it rests on); order is kept. `diagnosers` maps a
    kind to the function that finds its cause (each kind's module in `analysis/kinds/` names it);
    the text of a cause is the message catalogue's (`tb_health_plugin/i18n`)."""
    out = []
    for finding in findings:
        diagnose = diagnosers.get(finding.kind)
        if diagnose is None or "cause" in finding.evidence or "part_of" in finding.evidence:
            out.append(finding)  # nothing to add, or explained already / where it belongs
            continue
        cause, related = diagnose(finding, findings, signals)
        if cause:
            finding = replace(finding, evidence={**finding.evidence, "cause": cause, "related": related})
        out.append(finding)
    return out


def _event_end(finding: Event, signals: RunSignals) -> int:
    """The last step of the event: its end step, or for a divergence still open at the end of
    the run the last logged loss step (the whole rise is the event, not its first step)."""
    if finding.end_step is not None:
        return finding.end_step
    if finding.kind == "divergence" and signals.loss is not None and len(signals.loss):
        return max(finding.step, int(signals.loss.steps[-1]))
    return finding.step


def _exploded_first(finding: Event, findings: list[Event], signals: RunSignals) -> int | None:
    """The first step of an exploding-gradients finding at or before the event's end."""
    end = _event_end(finding, signals)
    exploded = [f.step for f in findings if f.kind == "exploding_gradients" and f.step <= end]
    return min(exploded) if exploded else None


def nonfinite_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    first = _exploded_first(finding, findings, signals)
    if first is not None:
        return "exploding_gradients", {"exploding_from_step": first, **_nonfinite_cause(signals)[1]}
    cause, related = _nonfinite_cause(signals)
    rise = _finite_rise_before(finding, findings)
    if cause == "forward_nonfinite" and rise is not None:
        return "finite_blow_up", {**related, "rise_onset_step": rise.step}
    return cause, related


def _finite_rise_before(finding: Event, findings: list[Event]) -> Event | None:
    """A divergence of the loss that began before this non-finite finding and was still going
    on at its step (said once or not): the loss had already risen far above its earlier level,
    with finite values, so the weights were damaged before the NaN/Inf (by updates too large, or
    by a bad batch where the rise began), and "check that step's inputs" points at the wrong
    step (zoo_seen3_059: a Transformer at a learning rate of 0.5, 2.0 at step 1, 20 at step 2,
    Inf from step 3; msloss_holdout_corrupt_2: a corrupted batch lifted the loss 89x from step
    417, another gave Inf at step 425)."""
    for other in findings:
        if other.kind == "divergence" and other.tag == finding.tag and other.step < finding.step \
                and (other.end_step is None or other.end_step >= finding.step):
            return other
    return None


def divergence_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    first = _exploded_first(finding, findings, signals)
    if first is not None:
        return "exploding_gradients", {"exploding_from_step": first}
    if _went_straight_to_nonfinite(finding, signals):
        cause, related = _nonfinite_cause(signals)
        if cause == "backward_overflow":
            return cause, related
    return _loss_event_cause(signals, findings, finding.step, _event_end(finding, signals), False)


def loss_spike_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    if finding.evidence.get("in_converged_regime"):
        return None, {}  # harmless at the scale of the run (`spikes` step 8): nothing to chase
    return _loss_event_cause(signals, findings, finding.step, _event_end(finding, signals), True)


def exploding_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    return _exploding_cause(signals, findings, finding.step)


def vanishing_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    if finding.evidence.get("zero_share", 0) > 0.5:
        return "dead_gradients", {"zero_share": finding.evidence["zero_share"]}
    return _lr_idle(signals, finding.step, _event_end(finding, signals))


def stall_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    end = _event_end(finding, signals)
    cause, related = _lr_idle(signals, finding.step, end)
    if cause:
        return cause, related
    earlier = [f for f in findings if f.kind == "vanishing_gradients" and f.step <= end]
    if earlier:
        return "vanishing_gradients", {"vanishing_from_step": min(f.step for f in earlier)}
    return None, {}


def loss_scale_cause(finding: Event, findings: list[Event], signals: RunSignals) -> tuple[str | None, dict]:
    near = [
        f
        for f in findings
        if f.kind == "exploding_gradients" and abs(f.step - finding.step) <= _gap(signals.loss_scale)
    ]
    if near:
        return "exploding_gradients", {"exploding_from_step": near[0].step}
    return None, {}


def _gap(series: ScalarSeries | None) -> int:
    if series is None or len(series) < 2:
        return 1
    return int(max(1, np.median(np.diff(series.steps))))


def _window(series: ScalarSeries | None, start: int, end: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(values before the window, values in it), the window widened by one logging interval."""
    if series is None or not len(series):
        return None
    gap = _gap(series)
    inside = (series.steps >= start - gap) & (series.steps <= end + gap)
    if not inside.any():
        return None
    first = int(np.argmax(inside))
    before = series.values[max(0, first - BASELINE_POINTS) : first]
    return before, series.values[inside]


def _spike(series: ScalarSeries | None, start: int, end: int) -> tuple[bool | None, float | None]:
    """(spiked?, window max / baseline median); (None, None) when the series cannot tell."""
    window = _window(series, start, end)
    if window is None:
        return None, None
    before, inside = window
    if not np.all(np.isfinite(inside)):
        return True, float("inf")
    before = before[np.isfinite(before) & (before > 0)]
    if before.size < 3:
        return None, None
    ratio = float(np.max(inside) / np.median(before))
    return ratio >= SPIKE_FACTOR, ratio


def _settled_after(series: ScalarSeries | None, end: int) -> bool | None:
    """Whether the `SETTLE_POINTS` points after the one-interval window past `end` have fallen
    back below the window's peak by `SPIKE_FACTOR` or more."""
    window = _window(series, end, end)
    if window is None:
        return None
    inside = window[1]
    after = series.values[series.steps > end + _gap(series)][:SETTLE_POINTS]
    if after.size < SETTLE_POINTS or not np.all(np.isfinite(inside)):
        return None
    return bool(np.all(np.isfinite(after)) and np.all(after * SPIKE_FACTOR <= np.max(inside)))


def _dropped(series: ScalarSeries | None, start: int, end: int) -> bool:
    window = _window(series, start, end)
    if window is None:
        return False
    before, inside = window
    reference = before[-1] if before.size else inside[0]
    return bool(np.any(inside < reference))


def _lr_rose(signals: RunSignals, findings: list[Event], start: int, end: int) -> bool:
    gap = _gap(signals.lr)
    for f in findings:
        if f.kind == "lr_schedule" and f.severity != "info" and start - gap <= f.step <= end + gap:
            return f.evidence.get("what") in ("reset", "jump")
    return False


def _peak_step(series: ScalarSeries, start: int, end: int) -> int:
    """The step of the largest value of `series` in the event's window (widened as `_window`)."""
    gap = _gap(series)
    inside = (series.steps >= start - gap) & (series.steps <= end + gap)
    values = np.where(np.isfinite(series.values[inside]), series.values[inside], np.inf)
    return int(series.steps[inside][int(np.argmax(values))])


def _loss_event_cause(signals, findings, start, end, is_spike: bool) -> tuple[str | None, dict]:
    grad_series = signals.grad_norm_max or signals.grad_norm
    spiked, ratio = _spike(grad_series, start, end)
    related: dict[str, Any] = {"grad_norm_ratio": ratio}
    scale_drop = _dropped(signals.loss_scale, start, end)
    overflow = _window(signals.overflow, start, end)
    overflowed = bool(overflow is not None and np.any(overflow[1] > 0))
    related.update(loss_scale_dropped=scale_drop, overflow=overflowed)
    if _lr_rose(signals, findings, start, end):
        return "lr_change", related
    if spiked and (scale_drop or overflowed):
        return "mixed_precision_overflow", related
    if spiked and is_spike:
        related["grad_norm_settled_after"] = _settled_after(grad_series, _peak_step(grad_series, start, end))
        if related["grad_norm_settled_after"]:
            return "bad_batch", related
    if spiked:
        return "unstable_update", related
    if spiked is False and is_spike:
        return "data", related
    return None, related


def _went_straight_to_nonfinite(finding: Event, signals: RunSignals) -> bool:
    """A divergence that is the loss turning non-finite, with no finite rise before it."""
    return "nonfinite_from_step" in finding.evidence and "rise_onset_step" not in finding.evidence


def _first_nonfinite(series: ScalarSeries | None) -> int | None:
    if series is None or not len(series):
        return None
    bad = ~np.isfinite(series.values)
    return int(series.steps[np.argmax(bad)]) if bad.any() else None


def _nonfinite_cause(signals: RunSignals) -> tuple[str | None, dict]:
    loss_step = _first_nonfinite(signals.loss)
    grads = {"global": _first_nonfinite(signals.grad_norm)}
    for param, series in signals.param_grad_norms.items():
        grads[param] = _first_nonfinite(series)
    grads = {k: v for k, v in grads.items() if v is not None}
    related: dict[str, Any] = {"loss_first_nonfinite_step": loss_step}
    if grads:
        first_param = min(grads, key=grads.get)
        related.update(grad_first_nonfinite_step=grads[first_param], first_nonfinite_gradient=first_param)
    if grads and (loss_step is None or min(grads.values()) < loss_step):
        return "backward_overflow", related
    if loss_step is not None:
        return "forward_nonfinite", related
    return None, related


def _exploding_cause(signals, findings, start) -> tuple[str | None, dict]:
    gap = _gap(signals.grad_norm)
    if _lr_rose(signals, findings, start - gap, start + gap):
        return "lr_change", {}
    lr = signals.lr
    if lr is None or not len(lr) or not np.isfinite(lr.values).any():
        return None, {}
    position = int(np.clip(np.searchsorted(lr.steps, start, side="right") - 1, 0, len(lr) - 1))
    peak = float(np.nanmax(lr.values))
    share = float(lr.values[position] / peak) if peak > 0 else 0.0
    if share < PEAK_SHARE:
        return None, {}
    reached = int(lr.steps[np.argmax(lr.values >= PEAK_SHARE * peak)])  # first there (NaN compares False)
    transient = default_warmup_end(lr.steps) - int(lr.steps[0]) + _gap(lr)  # the detectors' first tenth
    if start - reached > transient:
        return None, {}
    return "lr_peak", {"lr": float(lr.values[position]), "lr_peak": peak}


def _lr_idle(signals: RunSignals, start: int, end: int) -> tuple[str | None, dict]:
    lr = signals.lr
    if lr is None or not len(lr) or not np.isfinite(lr.values).any():
        return None, {}
    peak = float(np.nanmax(lr.values))
    inside = (lr.steps >= start) & (lr.steps <= end)
    if peak <= 0 or not inside.any():
        return None, {}
    share = float(np.nanmax(lr.values[inside]) / peak)
    if share <= LR_IDLE_SHARE:
        return "lr_at_floor", {"lr_share_of_peak": share}
    return None, {}
