"""Checks for the loss signals: non-finite values, spikes, divergence, stalls and overfitting.

Thin adapters (see `analysis/engine.py` for the check interface): they pick the loss, its
window maximum (our hooks' `train/loss_max`, which shows a one-step spike between logged
points), the eval loss and the learning-rate schedule out of `RunSignals`, and call the pure
detectors in `analysis/detectors/`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tb_health_plugin.analysis.detectors.climb_back import climbed_back
from tb_health_plugin.analysis.detectors.divergence import loss_divergence
from tb_health_plugin.analysis.detectors.nonfinite import (
    damaged_windows,
    nonfinite_counts,
    nonfinite_values,
    skipped_per_window,
)
from tb_health_plugin.analysis.detectors.overfitting import overfitting
from tb_health_plugin.analysis.detectors.schedule import Schedule, infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes, reached_by_window_maxima
from tb_health_plugin.analysis.detectors.stall import stalled_convergence
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals

# A loss_max spike within this many logged loss intervals of a loss spike is the same event.
SAME_SPIKE_INTERVALS = 2


def schedule_for(signals: RunSignals) -> Schedule | None:
    if signals.loss is None or len(signals.loss) == 0:
        return None
    lr = signals.lr
    if lr is None or len(lr) < 2:
        return infer_schedule(signals.loss.steps)
    return infer_schedule(signals.loss.steps, lr.steps, lr.values)


def check_nonfinite(signals: RunSignals) -> list[Event]:
    """NaN/Inf in the loss, the gradient norm, the eval loss and the learning rate.

    A loss that stays non-finite to the end is also a divergence (`check_loss_curve` reports
    it, with where it began and what to do); its non-finite finding then only states the fact
    and points there, and a gradient norm that went non-finite with it (not before it: that
    would say the backward pass overflowed first) is named in the same finding.
    """
    findings: list[Event] = []
    loss_found: list[Event] = []
    if signals.loss is not None:
        loss_found = nonfinite_values(
            signals.loss.steps, signals.loss.values, signals.tag("loss"), "training_loss", always_critical=True
        )
    grad_found: list[Event] = []
    if signals.grad_norm is not None:
        excused = None
        if signals.overflow is not None:
            excused = signals.overflow.steps[signals.overflow.values > 0]
        grad_found = nonfinite_values(
            signals.grad_norm.steps, signals.grad_norm.values, signals.tag("grad_norm"), "gradient_norm", excused
        )
    if loss_found and loss_found[0].evidence["persists_to_end"]:
        loss_found, grad_found = _as_end_of_divergence(loss_found[0], grad_found)
    findings += loss_found + grad_found
    for role, what in (("eval_loss", "evaluation_loss"), ("lr", "learning_rate")):
        series = getattr(signals, role)
        if series is not None:
            findings += nonfinite_values(series.steps, series.values, signals.tag(role), what)
    if signals.nonfinite_count is not None and not any(f.tag == signals.tag("loss") for f in findings):
        counts = signals.nonfinite_count
        findings += nonfinite_counts(counts.steps, counts.values, signals.tag("nonfinite_count"),
                                     _skipped_overflows(signals))
    return findings


# (non-finite earlier and finite again before the end, gradient norm folded in) -> message
END_OF_DIVERGENCE = {
    (False, False): "nonfinite.end_of_divergence",
    (False, True): "nonfinite.end_of_divergence.gradient_too",
    (True, False): "nonfinite.end_of_divergence.after_earlier",
    (True, True): "nonfinite.end_of_divergence.after_earlier.gradient_too",
}


def _as_end_of_divergence(loss: Event, grad_found: list[Event]) -> tuple[list[Event], list[Event]]:
    """The loss's non-finite finding as the end of its divergence, the gradient norm folded in
    when it went non-finite at the same logged step or later. A loss that was non-finite
    earlier and finite again before its non-finite end says so, with both steps."""
    with_grad = [g for g in grad_found if g.step >= loss.step]
    earlier = loss.evidence["nonfinite_to_end_from_step"] != loss.step
    message = END_OF_DIVERGENCE[earlier, bool(with_grad)]
    evidence = dict(loss.evidence, part_of="divergence")
    if with_grad:
        evidence["gradient_norm_nonfinite_from_step"] = with_grad[0].step
    args = {"nonfinite": "/".join(loss.evidence["values"])}
    merged = replace(loss, message=message, evidence=evidence, args=args)
    return [merged], [g for g in grad_found if g.step < loss.step]


def check_spikes(signals: RunSignals) -> list[Event]:
    schedule = schedule_for(signals)
    if schedule is None:
        return []
    loss = signals.loss
    counted = _nonfinite_windows(signals)
    findings = loss_spikes(loss.steps, loss.values, signals.tag("loss"), schedule, nonfinite_steps=counted)
    if signals.loss_max is not None and len(signals.loss_max):
        findings = [f for f in findings if not _routine_for_maxima(f, loss, signals.loss_max)]
        interval = float(np.median(np.diff(loss.steps))) if len(loss) > 1 else 1.0
        seen = np.array([f.step for f in findings], dtype=np.int64)
        window_schedule = infer_schedule(signals.loss_max.steps, *_lr_arrays(signals))
        for finding in loss_spikes(
            signals.loss_max.steps,
            signals.loss_max.values,
            signals.tag("loss_max"),
            window_schedule,
            what="loss_window_max",
            nonfinite_steps=counted,
        ):
            if seen.size and np.min(np.abs(seen - finding.step)) <= SAME_SPIKE_INTERVALS * interval:
                continue
            findings.append(finding)
    return findings


def _nonfinite_windows(signals: RunSignals) -> np.ndarray | None:
    """The logged steps whose window held NaN/Inf steps (the hooks' `train/nonfinite_count`)
    beyond the overflows the loss scaler skipped there (`train/overflow_count`): a skipped
    update damaged nothing, so a jump beside it is the run's own (`spikes` step 9)."""
    counts = signals.nonfinite_count
    if counts is None or not len(counts):
        return None
    return np.asarray(counts.steps)[damaged_windows(counts.values, _skipped_overflows(signals))]


def _skipped_overflows(signals: RunSignals) -> np.ndarray | float:
    """Per logged window of `train/nonfinite_count`, the overflows the loss scaler skipped there
    (`train/overflow_count`, 0 where not logged): the non-finite check and the spike detector's
    step 9 excuse them alike, as the grad-norm check excuses the flagged overflow steps."""
    if signals.overflow_count is None:
        return 0.0
    return skipped_per_window(signals.nonfinite_count.steps, signals.overflow_count.steps, signals.overflow_count.values)


def _routine_for_maxima(finding: Event, loss, loss_max) -> bool:
    """A spike of the logged loss whose height the run's window maxima reach routinely
    (`spikes.reached_by_window_maxima`)."""
    steps = np.asarray(loss.steps)
    core = (steps >= finding.step) & (steps <= (finding.end_step if finding.end_step is not None else finding.step))
    points = np.asarray(loss.values, dtype=np.float64)[core]
    return reached_by_window_maxima(finding, loss_max.steps, loss_max.values, points[np.isfinite(points)])


def check_loss_curve(signals: RunSignals) -> list[Event]:
    """Spikes, divergence and stalls of the training loss, reconciled.

    Once the loss diverges for good, later excursions are part of the divergence, not spikes,
    and a run that diverged is not "stalled". Except where every rise found is an overflow's
    (`_overflow_during_warmup`): a NaN the run recovered from does not make a stuck run learn.
    """
    schedule = schedule_for(signals)
    if schedule is None:
        return []
    loss = signals.loss
    window_min = signals.loss_min.values if signals.loss_min is not None and len(signals.loss_min) else None
    found = loss_divergence(loss.steps, loss.values, signals.tag("loss"), schedule, window_min=window_min)
    divergence = [_blew_up_in_first_interval(f, signals) for f in found if f.kind == "divergence"]
    if not divergence and (climb := climbed_back(loss.steps, loss.values, signals.tag("loss"))) is not None:
        divergence = [climb]
    spikes = _merge_spikes([f for f in found if f.kind == "loss_spike"], check_spikes(signals), loss.steps)
    if any(f.severity == "critical" for f in divergence):  # later jumps belong to the blow-up
        onset = min(f.step for f in divergence)
        spikes = [f for f in spikes if f.step < onset]
    nonfinite_steps = loss.steps[~np.isfinite(loss.values)] if divergence else None
    if not all(_overflow_during_warmup(f, nonfinite_steps, schedule) for f in divergence):
        return divergence + spikes
    stalls = stalled_convergence(loss.steps, loss.values, signals.tag("loss"), schedule)
    if divergence:  # every rise is an overflow's: the stall is since the blow-up
        stalls = [_since_the_blow_up(f, int(nonfinite_steps[0])) for f in stalls]
    return divergence + spikes + stalls


def _since_the_blow_up(stall: Event, blow_up_step: int) -> Event:
    """A run stuck since an overflow in its warm-up (first non-finite loss at `blow_up_step`) is
    told so, with the blow-up's advice: the flat run's (gradients that do not reach the
    parameters, a rate far too small) points the wrong way there, where a rate too high blew the
    weights up (zoo_seen26_122: AdamW at 0.19)."""
    if not stall.message.startswith("stalled.from_start"):
        return stall
    return replace(stall, message="stalled.from_start.after_blow_up",
                   args={**stall.args, "blow_up_step": blow_up_step},
                   evidence={**stall.evidence, "blow_up_step": blow_up_step})


def _overflow_during_warmup(finding: Event, nonfinite_steps: np.ndarray, schedule: Schedule) -> bool:
    """A rise of the loss that the run recovered from within the warm-up (the stall test's
    domain starts after it) and whose span meets that of the run's non-finite points
    (`nonfinite_steps`, in step order): the finite edges of a blow-up into NaN/Inf, the
    non-finite check's event. `analysis/same_event.py` folds such a rise into the non-finite
    finding only when it holds the whole episode; meeting it is enough here, as the zoo's rule 2
    leaves every rise up to the last NaN to rule 1 (zoo_seen24_047: a rise at steps 9-17 inside
    an episode from step 2 to 68, reported beside it). Such a run can still be stuck: a transformer under AdamW at 0.19 went from
    2.2 to 70 and Inf in its first 14 steps, then sat at 2.0-2.1 for 3,700 steps (zoo_seen26_122),
    and the stall was not judged because a divergence had been found. The zoo's labels say the
    same (`bench/detection/zoo_labels.py`, rules 2 and 5: the part of a rise up to its last NaN
    or Inf is rule 1's event, and a NaN the run recovered from does not make a stuck run learn).
    A rise open at the end, or one that ends after the warm-up, keeps the stall unjudged."""
    if finding.end_step is None or finding.end_step >= schedule.warmup_end_step or not nonfinite_steps.size:
        return False
    return finding.step <= int(nonfinite_steps[-1]) and int(nonfinite_steps[0]) <= finding.end_step


def _blew_up_in_first_interval(finding: Event, signals: RunSignals) -> Event:
    """A loss never logged finite whose gradient norm was logged finite at or before the loss's
    first point: the forward and backward passes computed finite values from the data and the
    initialisation, so the run started finite and blew up within the first logging interval (a
    Trainer logging every 20th step at a learning rate of 4: loss Inf at step 20, gradient norm
    1.7e12 there, NaN after). The advice is then the learning rate's, not "check the inputs"."""
    if finding.message != "divergence.nonfinite.never_finite" or signals.grad_norm is None:
        return finding
    first_loss_step = finding.evidence["nonfinite_from_step"]
    grad = signals.grad_norm
    finite = np.isfinite(grad.values) & (grad.steps <= first_loss_step)
    if not finite.any():
        return finding
    at = int(np.flatnonzero(finite)[-1])
    evidence = dict(finding.evidence, first_finite_grad_norm=float(grad.values[at]),
                    first_finite_grad_norm_step=int(grad.steps[at]))
    return replace(finding, message="divergence.nonfinite.first_interval", evidence=evidence)


def _merge_spikes(long_spikes: list[Event], spikes: list[Event], steps: np.ndarray) -> list[Event]:
    """Long spikes win over short ones found inside them (the same jump seen twice)."""
    interval = float(np.median(np.diff(steps))) if steps.size > 1 else 1.0
    margin = SAME_SPIKE_INTERVALS * interval
    kept = [
        f for f in spikes
        if not any(g.step - margin <= f.step <= (g.end_step or g.step) + margin for g in long_spikes)
    ]
    return long_spikes + kept


def check_overfitting(signals: RunSignals) -> list[Event]:
    if signals.loss is None or signals.eval_loss is None:
        return []
    return overfitting(
        signals.eval_loss.steps,
        signals.eval_loss.values,
        signals.loss.steps,
        signals.loss.values,
        signals.tag("eval_loss"),
    )


def _lr_arrays(signals: RunSignals) -> tuple[np.ndarray | None, np.ndarray | None]:
    if signals.lr is None or len(signals.lr) < 2:
        return None, None
    return signals.lr.steps, signals.lr.values

