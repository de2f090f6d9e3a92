"""Divergence: the loss blows up, or keeps rising above the best level it reached.

Method (excess over the running best, on the log of the loss):

1. Smooth the log-loss with a short running median (`SMOOTH_WINDOW` = 5 points, so one- and
   two-point spikes do not count) and take its running minimum after warm-up: the best level
   reached so far, B(t). Before the end of warm-up the loss may rise (early bumps are normal),
   so B starts there.
2. The excess E(t) = smooth(t) - B(t) of a healthy run stays within the noise of the smoothed
   curve plus the downward bias of a running minimum. The noise unit is sigma, the run's robust
   per-point noise (1.4826 * MAD of residuals around a 17-point running median). A 5-point
   median has standard deviation about 0.56 sigma, and over a flat stretch of m independent
   values the largest excess of one above an earlier minimum is at most the range of m
   Gaussian values, about 2 sqrt(2 ln m) * 0.56 sigma: 4.8 sigma for m = 10^4, 5.9 sigma for
   m = 10^6 (the smoothed values are correlated over 5 points, so m is a fifth of the points).
   `Z_EXCESS` = 6 sigma is therefore not reached by noise alone at any realistic run length.
   The excess is judged against the noise where it is (`local_sigma`): the running median of
   the absolute residuals over `NOISE_LOCAL_WINDOW` = 8 noise-trend windows (the spike
   detector's choice: long enough that an excursion does not set it), never below the run's
   sigma. A loss's noise on the log scale is far from constant: a classifier's per-batch loss
   near zero varies by a factor of two where its descent varied by a few percent, and a descent
   logged every 5th step is monotone, so a running median passes through every point and its
   residuals are exactly 0. The run's MAD then came from the descent alone (zoo_dev_072: 0.019
   logged every 5th step, 0.115 every step, 0.28 over its converged second half), and the
   converged tail's batch noise, 1.7x its best level, passed for a 6-sigma rise.
3. Practical floor: an excess below `MIN_RISE` = log(1.2) (20% above the best loss) is not
   called divergence whatever the noise. Epoch boundaries and data-mixture changes move a
   low-noise loss by a few percent, and stopping a run for that would be wrong.
4. Divergence = an excursion with E > threshold that lasts longer than a spike
   (`MAX_SPIKE_POINTS`), whether or not it is still open at the end of the run: a few high
   points at the very end cannot be told from a spike, and logged every 10th step they are
   one point or none, so calling them divergence made the verdict depend on the logging
   density. A blow-up at the end that is severe stays caught: its last points are far above
   where the run started (steps 6 and 7). A short rise that the run ends in NaN/Inf right
   after is no spike: the non-finite end tells them apart, and the rise dates its onset. Its onset is traced back on
   the raw log-loss: the first point after the last one within 2 sigma of B before the
   excursion, so the reported step is where the rise began, not where it became undeniable.
   A steady creep outgrows the noise only slowly, so that rule finds its start late: the
   onset is the earlier of it and the point where a robust straight line through the rise
   (Theil-Sen, from the ONSET_Z onset to the smoothed peak) crosses the
   best level before it (`_trend_onset`).
   An excursion still open at the end is critical; one the run recovered from is a warning.
5. A recovered excursion that started with a jump (its first point already above the
   threshold, or its peak within `SUDDEN_POINTS` of its onset) is not a divergence but a
   long-lived loss spike (a bad batch that damaged the weights for a while), reported as
   `loss_spike`.
6. A run that ends far above where it started diverged, whatever happened in between (the
   running best of step 1 starts after warm-up, so a blow-up during warm-up that the run never
   climbs back from would otherwise pass as an "early bump" and a partial recovery). The loss
   of the untrained model is the highest a sane run should see again: the median of the last
   `EDGE_POINTS` smoothed points more than `max(Z_EXCESS sigma, ENDS_ABOVE_START)` above the
   lowest of the first `EDGE_POINTS` logged values (a blow-up can begin within them) is a
   critical divergence, from the first point after the start level's own that rose beyond
   that margin (a rise follows its start, as in step 7). `ENDS_ABOVE_START` = log(2): twice the initial loss at the end means the weights
   are worse than the random initialisation, far beyond what noise, epoch effects or a
   data-mixture change do. When the logger recorded the lowest loss of each logging window
   (our hooks' `train/loss_min`), the first window's minimum is where the run started too: a
   first window that averages a blow-up hides the start from the logged means. The finding says
   which level it compared with (`_StartSaid`): where the run started, when that is its first
   logged point or the first window's minimum, else the lowest of its first points, and it
   calls the weights worse than their initialisation only when the end also stands twice above
   the first logged loss. Against the lowest of its first points when that is not the first
   (a level the run reached), the end must also have undone more than `LOST_SHARE` of what the
   run had learned by then, in loss units (`_undid_most`): a lucky low batch is no level.
7. A run whose loss went far above where it started, `FAR_ABOVE_START` = 100x for longer than
   a spike (the 5-point median, so at least 3 consecutive points), went through weights far
   worse than their random initialisation, whatever happened afterwards: critical, even when
   the loss came back (back to the initial loss is "learned nothing", not a recovery).
   Healthy warm-up bumps and loss spikes reach a few times the *current* loss (the published
   LLM spikes and the benchmark's labelled ones are 1.5-10x), and the current loss is at or
   below the start, so 100x above the start (also more than `Z_EXCESS` sigma) is never noise.
   Only points after the one the start level was taken from count (a rise follows its
   start): logged every 10th step, the first `EDGE_POINTS` span 50 steps, in which a fast run
   can fall 1000x, and its first points then stand far above their lowest without any rise.
   Below 100x, the same test with step 6's margin, `max(Z_EXCESS sigma, ENDS_ABOVE_START)`
   (twice the start: weights worse than their initialisation), over more smoothed points than
   a spike has (`MAX_SPIKE_POINTS`), against the lower of the first logged point and the median
   of the first points (`_untrained_level`; like with like: a window minimum sits below its
   window's mean by the noise, by more than half in a noisy run, and so does the lowest of a
   few noisy points), is a warning, wherever it happened and whatever came
   after: the running best of step 4 starts after warm-up, so a rise within the first tenth
   of the run (the warm-up assumed without a logged rate) that came back was seen by no step
   (zoo_sealed_063 of seed 24171: from 1.3 to 10-24 for 100 of its 296 steps, then 2-4, and
   "healthy"). Healthy runs do not stand twice above their untrained loss for longer than a
   spike: a warm-up bump lifts the current loss, which is below the start. What it needs is
   the start in the log: a log whose first point comes after an early blow-up (every 10th
   step from step 10) shows a descent from that point; our hooks and MindSpore's
   SummaryCollector log step 1. Where the margin is the noise's (a run converged to near zero
   has a huge per-point sigma on the log scale), a stretch of more than `MAX_SPIKE_POINTS`
   smoothed points above twice the start is judged as a held level instead: its median above
   twice the start by `Z_EXCESS` standard errors of the two levels' difference
   (`_held_above_start`).
8. A rise that stays in the converged regime is no divergence: a loss bounded below by zero
   whose smoothed peak stays at or under `stall.CONVERGED_SHARE` (1%) of where the run started
   has fit its data (`stall.converged`), and on the log scale its batch noise there is huge (zoo_holdout_013: a
   classifier at 0.0000-0.0003 that a corrupted batch moved to 0.001-0.017, 1% of its starting
   2.07, was a "41107x rise above its best" and a critical divergence). The stall detector
   draws the same line: a flat tail there is convergence, not a stall. A sudden excursion (step
   5's long spike) is as high as its highest logged point, not its smoothed peak: a jump is one
   or two points, which a 5-point median removes. A corrupted batch that threw a converged
   classifier from 2.6e-4 to 7.02, 4.4 times where it started, and left it 3-67 times above
   its level for 340 steps (smoothed peak 0.017, under 1% of the start) was reported by no
   detector (zoo_seen20_127: the spike detector leaves an excursion that wide to this one).
   zoo_holdout_013's highest point after its corrupted batch, 0.0173, stays under the line.
   The long spike reports that point too: the excursion's highest point after `start` (where
   the smoothed loss first stood above the threshold) missed a jump that came before the damage
   built up (zoo_seen18_090: a corrupted batch at step 145 gave 23.6 from a level near 0.17, and
   the finding said "jumps 11.4x above its best level at step 145", the ratio of step 159).
   A rise open at the end that left the converged regime (its best level before it at or
   under 1% of the start) is information, not an alarm, when the run ends less than
   `MIN_SHARE_OF_START` (a quarter) of the start above that best (`_slight_from_converged`):
   the run kept most of what it learned, and `climb_back` and the zoo's rule 2 ask a quarter
   of the start of a run that lost its learning.
9. A loss that is non-finite from its first logged point but was finite at the start (a finite
   start loss as in 6, or a finite first point followed only by non-finite ones) blew up within
   the first logging window: the advice is the learning rate, not the inputs.
10. A loss that went non-finite and is finite again at the end did not recover when its end,
   the median of its last tenth of finite points (at least `EDGE_POINTS`, all after its first
   NaN/Inf), stands more than twice above its first logged point (`ENDS_ABOVE_START`): a
   critical divergence (`_not_recovered_after_blow_up`). The first point is where the run
   started, the untrained loss when the log holds step 1 (our hooks and MindSpore's
   SummaryCollector do); a log that begins later (every 5th step from step 5) starts from a
   level the run reached, and the finding names that point rather than calling the weights
   worse than their initialisation. Step 6 asks the same of a run's last five smoothed points,
   but with a margin of six noise sigmas: the finite points of the six runs this step finds on
   the tuning splits have sigmas of 0.27-0.43 on the log scale, margins of 5-13x, and those
   ending 2.3-3.6x above their first loss went unreported but for the non-finite finding
   (a descent from 18.6 over 11 points gave zoo_seen29_067's 0.43), which says a blow-up
   happened, not that the run never came back (zoo_seen29_067: 2.06 at step 1, Inf from step
   10 to 110, then 18.6 falling to 4.5-7 at the end; zoo_seen22_031: 1.99 at step 1, NaN/Inf
   among its points to the end, its last tenth at 7.1). The noise margin guards a run that never
   failed against its own scatter; here the run already failed, the question is only whether it
   came back, and the end is a level held over a tenth of the run, not a point. On the
   1,272 zoo runs of the tuning splits (dev, holdout, seen22 to seen29) it holds on 6, each
   labelled divergent by the zoo's rule 2 (3 of them had no divergence finding before, 3 a
   warning), and on none labelled otherwise (a run whose last five points stood 2.3x above
   its start but whose last tenth sat at 0.3x, zoo_seen25_046, is why the end is a tenth of
   the run). The non-finite finding stays: it dates the blow-up; this one says the run did not
   recover, and both name one restart step (`same_event`).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.robust import (
    MAD_TO_SIGMA,
    MEDIAN_SD,
    TINY_LOG_SCALE,
    independent_points,
    log_loss,
    robust_lag1_autocorrelation,
    robust_sigma,
    rolling_median,
    theil_sen,
)
from tb_health_plugin.analysis.detectors.robust_levels import runs_of_true
from tb_health_plugin.analysis.detectors.schedule import Schedule
from tb_health_plugin.analysis.detectors.stall import converged, start_level
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.contract import SEVERITY_RANK

SMOOTH_WINDOW = 5
NOISE_TREND_WINDOW = 17
NOISE_LOCAL_WINDOW = 8 * NOISE_TREND_WINDOW + 1
Z_EXCESS = 6.0
MIN_RISE = float(np.log(1.2))
ONSET_Z = 2.0
MAX_SPIKE_POINTS = 8
MIN_POINTS = 8
SUDDEN_POINTS = 3  # a rise reaching its peak within 3 logged points of its onset is a jump
EDGE_POINTS = 5  # points at each end of the run compared by step 6
LOST_SHARE = 0.5  # a run that lost what it learned undid more than half of it (`climb_back`, step 6)
MIN_SHARE_OF_START = 0.25  # ... and by a quarter of its start loss at least (`climb_back`, step 8)
ENDS_ABOVE_START = float(np.log(2.0))
FAR_ABOVE_START = float(np.log(100.0))
TREND_MIN_POINTS = 8  # a line needs a few points to be worth more than the ONSET_Z rule
TREND_MAX_POINTS = 400


def local_sigma(y: np.ndarray, sigma: float) -> np.ndarray:
    """Per point, the noise around it (step 2 of the module doc), at least `sigma`."""
    residual = np.abs(y - rolling_median(y, NOISE_TREND_WINDOW, edges="trend"))
    local = MAD_TO_SIGMA * rolling_median(residual, NOISE_LOCAL_WINDOW, edges="mirror_within")
    return np.maximum(local, sigma)


def excess_over_best(y: np.ndarray, settled_from: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Smoothed log-loss, its running best after `settled_from`, and the per-point noise sigma."""
    smooth = rolling_median(y, SMOOTH_WINDOW, edges="trend")
    sigma = max(robust_sigma(y - rolling_median(y, NOISE_TREND_WINDOW, edges="trend")), TINY_LOG_SCALE)
    best = np.full(y.size, np.inf)
    best[settled_from:] = np.minimum.accumulate(smooth[settled_from:])
    return smooth, best, sigma


def loss_divergence(
    steps: np.ndarray,
    values: np.ndarray,
    tag: str,
    schedule: Schedule,
    what: str = "loss",
    window_min: np.ndarray | None = None,
) -> list[Event]:
    """Divergence findings for one loss series; a run ending in NaN/Inf diverged too.

    `window_min`: the lowest loss of each logging window when the logger recorded it (our
    hooks' `train/loss_min`), in step order. Its first value is where the run started (steps 6
    and 8 of the module doc); its last values are compared with that start like with like.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    findings: list[Event] = []
    nonfinite_tail_start = None
    if values.size and not finite[-1]:
        last_finite = np.flatnonzero(finite)
        nonfinite_tail_start = int(last_finite[-1]) + 1 if last_finite.size else 0
    f_steps, f_values = (steps, values) if finite.all() else (steps[finite], values[finite])  # no copy if all finite
    start_loss, end_min = _window_min_ends(window_min)
    rise, rise_open, long_spikes = _finite_divergence(
        f_steps, f_values, tag, schedule, what, start_loss, end_min, ends_nonfinite=nonfinite_tail_start is not None
    )
    findings.extend(long_spikes)
    if nonfinite_tail_start is not None:
        nan_step = int(steps[nonfinite_tail_start])
        onset = rise.step if rise is not None and rise_open else nan_step
        findings.append(
            Event(
                kind="divergence",
                severity="critical",
                step=onset,
                tag=tag,
                **_nonfinite_end_message(steps, values, what, onset, start_loss),
                evidence={
                    "nonfinite_from_step": nan_step,
                    "start_loss": start_loss if start_loss is not None else _first_finite(values),
                    **({"rise_onset_step": rise.step, **rise.evidence} if rise is not None else {}),
                },
            )
        )
    elif rise is not None and rise.severity == "critical":
        findings.append(rise)
    elif (not_recovered := _not_recovered_after_blow_up(steps, values, finite, tag, what)) is not None:
        findings.append(not_recovered)  # step 10 of the module doc: it replaces a lesser finding of the rise
    elif rise is not None:
        findings.append(rise)
    return findings


def _not_recovered_after_blow_up(steps: np.ndarray, values: np.ndarray, finite: np.ndarray, tag: str,
                                 what: str) -> Event | None:
    """Step 10 of the module doc: a loss finite again at the end of a NaN/Inf episode whose last
    tenth stands more than twice above its first logged point, else None."""
    if finite.all() or not finite[0] or not finite[-1]:
        return None
    first_bad = int(np.argmax(~finite))
    kept = np.flatnonzero(finite)
    end_points = max(EDGE_POINTS, kept.size // 10)
    if kept.size < 2 * EDGE_POINTS or kept[-end_points] < first_bad:
        return None  # no start and end apart, or an end that is not all aftermath
    ending, before = values[kept[-end_points:]], values[:first_bad]  # finite: the first NaN/Inf comes after them
    if np.any(ending <= 0) or np.any(before <= 0):
        return None  # a level at zero has no ratio to the other
    before = np.log(before)
    start = float(before[0])
    end = float(np.median(np.log(ending)))
    if end - start <= ENDS_ABOVE_START:
        return None
    last = int(np.flatnonzero(before - start <= ENDS_ABOVE_START)[-1])  # the first point is among them
    last_healthy = int(steps[last]) if last > 0 else None
    return Event(
        kind="divergence",
        severity="critical",
        step=int(steps[last + 1]),
        tag=tag,
        message="divergence.not_recovered",
        args={
            "what": Phrase(f"series.{what}"),
            "then": Phrase("divergence.ended_above.restart" if last_healthy is not None
                           else "divergence.ended_above.lower_lr"),
        },
        evidence={
            "start_loss": float(values[0]),
            "start_step": int(steps[0]),
            "nonfinite_from_step": int(steps[first_bad]),
            "end_loss": float(np.exp(end)),
            "end_points": int(end_points),
            "ratio_end_to_start": float(np.exp(end - start)),
            "last_healthy_step": last_healthy,
        },
    )


def _window_min_ends(window_min: np.ndarray | None) -> tuple[float | None, float | None]:
    """(the first window's minimum, the median of the last `EDGE_POINTS` finite ones), if finite."""
    if window_min is None or np.asarray(window_min).size == 0:
        return None, None
    window_min = np.asarray(window_min, dtype=np.float64)
    start = float(window_min[0]) if np.isfinite(window_min[0]) else None
    finite = window_min[np.isfinite(window_min)]
    end = float(np.median(finite[-EDGE_POINTS:])) if finite.size >= EDGE_POINTS else None
    return start, end


def _first_finite(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite[0]) if finite.size else None


def _nonfinite_end_message(steps, values, what, onset, start_loss) -> dict:
    """Step 8 of the module doc: where to restart from, or why it blew up at once (the
    event's `message` and `args`)."""
    finite = np.isfinite(values)
    healthy = steps[finite & (steps < onset)]
    started_at_once = healthy.size == 1 and healthy[0] == steps[0]
    args: dict = {"what": Phrase(f"series.{what}")}
    if healthy.size > 1 or (healthy.size == 1 and not started_at_once):
        args["restart_step"] = int(healthy[-1])
        return {"message": "divergence.nonfinite.restart", "args": args}
    if started_at_once or start_loss is not None:
        if healthy.size:
            args.update(start=Phrase("divergence.start.at_step"), first_finite=float(values[finite][0]),
                        first_finite_step=int(healthy[0]))
        else:
            args.update(start=Phrase("divergence.start.window_min"), window_start_loss=start_loss)
        return {"message": "divergence.nonfinite.at_once", "args": args}
    return {"message": "divergence.nonfinite.never_finite", "args": args}


def _finite_divergence(
    steps: np.ndarray,
    values: np.ndarray,
    tag: str,
    schedule: Schedule,
    what: str,
    start_loss: float | None = None,
    end_min: float | None = None,
    ends_nonfinite: bool = False,
) -> tuple[Event | None, bool, list[Event]]:
    """The divergence (an excursion open at the end wins over a recovered one), whether it is
    open at the end, and the long spikes: sudden excursions that recovered."""
    n = steps.size
    if n < MIN_POINTS:
        return None, False, []
    y = log_loss(values)
    settled_from = int(np.searchsorted(steps, schedule.warmup_end_step))
    settled_from = min(settled_from, n - 1)
    smooth, best, sigma = excess_over_best(y, settled_from)
    excess = smooth - best
    noise = local_sigma(y, sigma)
    threshold = np.maximum(Z_EXCESS * noise, MIN_RISE)
    above = np.zeros(n, dtype=bool)
    above[settled_from:] = excess[settled_from:] > threshold[settled_from:]
    excursions = runs_of_true(above)  # not scipy's label: 36 bytes a point for a 1-D mask
    start_level = _start_level(values, y, start_loss)
    ended_above = _ended_above_start(steps, values, y, smooth, sigma, tag, what, start_level, end_min)
    far_above = None if ended_above is not None else _far_above_start(
        steps, values, y, smooth, sigma, tag, what, start_level
    )
    if not excursions:
        if ended_above is not None:
            return ended_above, True, []
        return far_above, False, []
    divergence: Event | None = None
    divergence_open = False
    long_spikes: list[Event] = []
    for start, stop in excursions:
        open_at_end = stop >= n
        if stop - start <= MAX_SPIKE_POINTS and not (open_at_end and ends_nonfinite):
            continue  # no longer than a spike: see step 4 of the module doc
        peak = start + int(np.argmax(y[start:stop]))
        onset = _onset(y, best, sigma, start, settled_from)
        jumped = y[onset] - best[max(onset - 1, settled_from)] > threshold[onset]
        sudden = not open_at_end and (peak - onset < SUDDEN_POINTS or jumped)
        if sudden:  # a jump is as high as its highest point, which can precede `start` (step 8)
            peak = onset + int(np.argmax(y[onset:stop]))
        reached = float(y[peak]) if sudden else float(smooth[peak])  # a rise holds its smoothed level
        if converged(_level(values, y, reached), _loss_value(values, y, start_level), values):
            continue  # step 8 of the module doc
        if sudden:
            long_spikes.append(_long_spike(steps, values, y, best, tag, what, onset, peak, stop, sigma))
            continue
        if divergence is not None and (divergence_open or not open_at_end):
            continue
        onset = min(onset, _trend_onset(y, smooth, best, sigma, onset, start, stop, settled_from))
        slight = _slight_from_converged(values, y, best[start], smooth) if open_at_end else None
        divergence = _divergence_finding(
            steps, values, y, best, excess, tag, what, onset, start, peak, stop, open_at_end, noise[peak], threshold[peak],
            slight,
        )
        divergence_open = open_at_end
    if ended_above is not None and not divergence_open:
        divergence, divergence_open = ended_above, True
    elif far_above is not None and (divergence is None or SEVERITY_RANK[far_above.severity] > SEVERITY_RANK[divergence.severity]):
        divergence = far_above  # its jumps are part of it, not spikes of their own
        long_spikes = [f for f in long_spikes if not far_above.step <= f.step <= far_above.end_step]
    return divergence, divergence_open, long_spikes


def _start_level(values: np.ndarray, y: np.ndarray, start_loss: float | None) -> float:
    """The log-loss the run started from (step 6): the lowest of the first points, or of the
    first window's minimum when the logger recorded it (only for a positive loss, whose log is
    not shifted by `log_loss`)."""
    level = float(np.min(y[:EDGE_POINTS]))  # a blow-up can begin within the first points
    if start_loss is not None and start_loss > 0 and np.all(values > 0):
        level = min(level, float(np.log(start_loss)))
    return level


def _untrained_level(y: np.ndarray) -> float:
    """Step 7's warning start: `stall.start_level` over the first `EDGE_POINTS`, the lower of the
    first logged point and their median, the two levels the zoo's rule 2 draws its line from (the first loss and the
    median of the first steps). The warning rests on the untrained loss (a warm-up bump lifts
    the current loss, which is below it); the first point is that loss, and the lower of the two
    when a blow-up begins within the first points; the median, when the first point already
    holds one. Not their lowest: a run that fell within them has reached that level, and a bump
    to a few times a reached level is what a healthy warm-up does; and the lowest of five noisy
    points lies below their level (zoo_seen28_043: 2.16, 1.93, 1.09, 0.35 and a lucky batch at
    0.029 by step 20, a bump to 1-3, below where it started, and on down to 0.1-0.6, was a "114x"
    blow-up). Steps 6 and 7's critical test keep the lowest: a run that ends or sits 100x above
    a level it reached has lost it (zoo_seen_079: 2.05 to 0.80 within its first points, then
    chance level to the end)."""
    return start_level(y, EDGE_POINTS)


def _start_index(y: np.ndarray, start_level: float) -> int:
    """The logged point the start level was taken from, or -1 when it came from the first
    window's minimum (before every logged point). Logged sparsely, the first `EDGE_POINTS`
    points span much of a fast run: one that fell 1000x within them starts from their lowest,
    and its earlier points stand far above that start without anything having risen."""
    at = np.flatnonzero(y[:EDGE_POINTS] == start_level)
    return int(at[0]) if at.size else -1


def _loss_value(values: np.ndarray, y: np.ndarray, start_level: float) -> float:
    """The loss at `start_level` in its own units (exact for a positive loss, whose y is log)."""
    return float(np.exp(start_level)) if np.all(values > 0) else _level(values, y, start_level)


def _far_above_start(steps, values, y, smooth, sigma, tag, what, start_level) -> Event | None:
    """Step 7 of the module doc: a sustained excursion 100x above where the run started
    (critical), or twice above it for longer than a spike (a warning)."""
    if y.size < MIN_POINTS:
        return None
    rise_from = _start_index(y, start_level) + 1  # a rise comes after the start it rose from
    margin = max(Z_EXCESS * sigma, FAR_ABOVE_START)
    far = smooth - start_level > margin
    far[:rise_from] = False
    severity, held = "critical", False
    if far.any():
        first_far = int(np.argmax(far))
        last_far = int(np.flatnonzero(far)[-1])
    else:  # the logged points' own start: a window minimum sits below them by the noise
        start_level = _untrained_level(y)
        margin = max(Z_EXCESS * sigma, ENDS_ABOVE_START)
        above = smooth - start_level > margin
        above[: _start_index(y, start_level) + 1] = False
        long = [(a, b) for a, b in runs_of_true(above) if b - a > MAX_SPIKE_POINTS]
        if not long:
            start_level, long = _held_above_start(y, smooth)
            margin, held = ENDS_ABOVE_START, True
        if not long:
            return None
        first_far, last_far = long[0][0], long[0][1] - 1
        severity = "warning"
    onset = _left_start(y, start_level, sigma, first_far)
    peak = onset + int(np.argmax(y[onset : last_far + 1]))  # the event's own peak, not the run's
    ratio = float(np.exp(y[peak] - start_level))
    last_healthy = int(steps[onset - 1]) if onset > 0 else None
    end_loss = float(np.exp(np.median(smooth[-EDGE_POINTS:]) - start_level))
    start = _StartSaid(y, start_level, held)
    return Event(
        kind="divergence",
        severity=severity,
        step=int(steps[onset]),
        end_step=int(steps[last_far]),
        tag=tag,
        message="divergence.far_above" if end_loss >= 1.0 else "divergence.far_above.learned_after",
        args={
            "what": Phrase(f"series.{what}"),
            "margin_factor": float(np.exp(margin)),
            "start": Phrase(start.phrase),
            "claim": Phrase("divergence.far_above.worse_than_init" if start.is_untrained(y[peak])
                            else "divergence.far_above.worse_than_reached"),
            "then": Phrase("divergence.far_above.restart" if onset > 1 else "divergence.far_above.from_init"),
        },
        evidence={
            "start_loss": _loss_value(values, y, start_level),
            **start.evidence(steps, values),
            "peak_loss": float(values[peak]),
            "peak_step": int(steps[peak]),
            "ratio_peak_to_start": ratio,
            "ratio_end_to_start": end_loss,
            "far_above_until_step": int(steps[last_far]),
            "margin_log": float(margin),
            "noise_sigma_log": float(sigma),
            "last_healthy_step": last_healthy,
        },
    )


class _StartSaid:
    """Which level steps 6 and 7 call the start, said as it is. The lowest of the first logged
    points is the untrained loss when it is the first of them (or the first window's minimum,
    before them all); when the run fell within those points (logged every 10th step, they span
    50 steps) it is a level the run had reached, not where it started, and a loss back near its
    first logged value is not "worse than at initialisation": zoo_seen_079 fell from 2.05 to 1.04
    in its first five points (0.80 by step 30), jumped to 5.4 and sat at 2.09 to the end, "2x
    above where it started (1.042): the weights are worse than at initialisation". `held`: the
    level test's start, the median of the first points (`_held_above_start`)."""

    def __init__(self, y: np.ndarray, start_level: float, held: bool = False) -> None:
        self.first_level = float(y[0])
        self.at = -1 if held else _start_index(y, start_level)
        self.lowest = self.at >= 0 and y[self.at] <= np.min(y[:EDGE_POINTS])
        self.held = held

    @property
    def phrase(self) -> str:
        if self.held:
            return "divergence.start.median_of_first"
        if self.at <= 0:
            return "divergence.start.where"
        return "divergence.start.early_low" if self.lowest else "divergence.start.early_median"

    def is_untrained(self, level: float) -> bool:
        """Whether `level` also stands twice above the first logged loss (always, when the start
        is the first point or the first window's minimum, below it; the level test's median of
        the first points is not: a run can fall within them)."""
        return (self.at <= 0 and not self.held) or level - self.first_level > ENDS_ABOVE_START

    def evidence(self, steps: np.ndarray, values: np.ndarray) -> dict:
        return {"start_step": int(steps[self.at]) if self.at >= 0 else None, "first_loss": float(values[0])}


def _held_above_start(y: np.ndarray, smooth: np.ndarray) -> tuple[float, list[tuple[int, int]]]:
    """Step 7's level test: stretches of more than `MAX_SPIKE_POINTS` smoothed points above
    twice the start whose median stands above twice the start by `Z_EXCESS` standard errors of
    the difference of the two levels. The per-point noise of the whole run (step 7's margin)
    is the wrong yardstick for a level held over many points, and a run that converged to
    near zero has a huge one on the log scale: zoo_seen9_123 (SGD, rate 1.3) went from 2.08 to
    a median of 9 for 95 points and back, with per-point sigma 1.2 from its converged end
    (6 sigma: 1,500x). The start here is the median of the first `EDGE_POINTS` points, with
    standard error 1.2533 sigma_0 / sqrt(`EDGE_POINTS`) (sigma_0 from the residuals of the first
    `NOISE_TREND_WINDOW` points), not their lowest: the lowest of five noisy points lies about
    1.2 sigma_0 below their level (a first version taking it found a "divergence" in a healthy
    noisy run logged every 10th step, from a lucky 0.03 among 1.2, 1.1, 0.6, 0.3). The
    stretch's level has standard error 1.2533 sigma_s / sqrt(k_eff) (the median of k points,
    k_eff = k (1 - rho) / (1 + rho) for lag-1 autocorrelated noise, sigma_s and rho from the
    stretch's own residuals around a `NOISE_TREND_WINDOW` median). Returns that start and the
    stretches. The residuals are computed again here, not kept from step 2: this branch is
    rarely taken, and holding them through the detector would cost 8 bytes a point of every run
    (README, "Memory")."""
    head = min(y.size, NOISE_TREND_WINDOW)
    residual = y - rolling_median(y, NOISE_TREND_WINDOW, edges="trend")
    start = float(np.median(y[:EDGE_POINTS]))
    start_error = MEDIAN_SD * robust_sigma(residual[:head]) / np.sqrt(EDGE_POINTS)
    above = smooth - start > ENDS_ABOVE_START
    above[:EDGE_POINTS] = False
    held = []
    for a, b in runs_of_true(above):
        if b - a <= MAX_SPIKE_POINTS:
            continue
        rho = robust_lag1_autocorrelation(residual[a:b])
        level_error = MEDIAN_SD * robust_sigma(residual[a:b]) / np.sqrt(independent_points(b - a, rho))
        if float(np.median(y[a:b])) - start > ENDS_ABOVE_START + Z_EXCESS * np.hypot(level_error, start_error):
            held.append((a, b))
    return start, held


def _ended_above_start(steps, values, y, smooth, sigma, tag, what, start_level, end_min) -> Event | None:
    """Step 6 of the module doc: the run ends far above the loss of the untrained model.

    A start taken from a window minimum is biased low by the noise within the window, so the
    end is then the window minima's too (like with like) when lower than the logged loss's."""
    if y.size < 4 * EDGE_POINTS:
        return None
    end_level = float(np.median(smooth[-EDGE_POINTS:]))
    if end_min is not None and end_min > 0 and np.all(values > 0):
        end_level = min(end_level, float(np.log(end_min)))
    margin = max(Z_EXCESS * sigma, ENDS_ABOVE_START)
    if end_level - start_level <= margin:
        return None
    start = _StartSaid(y, start_level)
    if start.at > 0 and not _undid_most(values, y, start_level, end_level):
        return None
    above = smooth - start_level > margin
    above[: start.at + 1] = False  # a rise comes after the start it rose from (as in step 7)
    first_above = int(np.argmax(above))
    onset = _left_start(y, start_level, sigma, first_above)
    peak = onset + int(np.argmax(y[onset:]))  # the rise's own peak, not the run's
    last_healthy = int(steps[onset - 1]) if onset > 0 else None
    ratio = float(np.exp(end_level - start_level))
    return Event(
        kind="divergence",
        severity="critical",
        step=int(steps[onset]),
        tag=tag,
        message="divergence.ended_above",
        args={
            "what": Phrase(f"series.{what}"),
            "start": Phrase(start.phrase),
            "claim": Phrase("divergence.ended_above.worse_than_init" if start.is_untrained(end_level)
                            else "divergence.ended_above.lost_learning"),
            "then": Phrase("divergence.ended_above.restart" if last_healthy is not None
                           else "divergence.ended_above.lower_lr"),
        },
        evidence={
            "start_loss": _loss_value(values, y, start_level),
            **start.evidence(steps, values),
            "end_loss": _loss_value(values, y, end_level),
            "ratio_end_to_start": ratio,
            "peak_loss": float(values[peak]),
            "peak_step": int(steps[peak]),
            "margin_log": float(margin),
            "noise_sigma_log": float(sigma),
            "last_healthy_step": last_healthy,
        },
    )


def _undid_most(values: np.ndarray, y: np.ndarray, start_level: float, end_level: float) -> bool:
    """Step 6 against a level the run reached within its first points (not the first point, nor
    the first window's minimum): the end undid more than `LOST_SHARE` (half) of what
    the run had learned by then, in loss units, as `climb_back` and the zoo's rule 2 ask of a
    run that lost what it learned. On the log scale a lucky low batch among the first points
    makes an end that kept most of the learning look far above "the start" (zoo_seen28_043
    without its window minima: 2.16 at step 1, 0.029 at step 20, 0.45 at the end: "15x")."""
    start, first, end = (_loss_value(values, y, level) for level in (start_level, float(y[0]), end_level))
    return end - start > LOST_SHARE * (first - start)


def _slight_from_converged(values: np.ndarray, y: np.ndarray, best_level: float, smooth: np.ndarray) -> dict | None:
    """Step 8's open rise from the converged regime: its loss levels (`end_loss`, `start_loss`,
    `end_share` of the start) when the best level before it had fit the data (at or under
    `stall.CONVERGED_SHARE` of the start, `_untrained_level`) and the run ends less than
    `MIN_SHARE_OF_START` of the start above that best, else None. On the log scale such a rise is
    huge; in the loss's units the run kept most of what it learned, the materiality that
    `climb_back` and the zoo's rule 2 ask of a run that lost its learning (a rebound of a
    quarter of the start). A corrupted batch that knocked a converged classifier from 0.004 to
    34.6 and left it at 0.18 (zoo_seen28_066; 9% of its start, 2.09) was a critical
    divergence, "8020x above its best"; five such runs on the tuning zoo, none labelled
    divergent, against three labelled ones from a best that small, which end 0.39-1.08 of their
    start above it."""
    start = _loss_value(values, y, _untrained_level(y))
    best = _loss_value(values, y, best_level)
    end = _loss_value(values, y, float(np.median(smooth[-EDGE_POINTS:])))
    if not converged(best, start, values) or end - best >= MIN_SHARE_OF_START * start:
        return None
    return {"end_loss": end, "start_loss": start, "end_share": end / start}


def _divergence_finding(
    steps, values, y, best, excess, tag, what, onset, start, peak, stop, open_at_end, sigma, threshold, slight=None
) -> Event:
    """The rise of step 4: critical when still open at the end, a warning when the run
    recovered, information only when it is slight (`_slight_from_converged`)."""
    best_level = best[start]
    ratio = float(np.exp(y[peak] - best_level))
    last_healthy = int(steps[onset - 1]) if onset > 0 else None
    if slight is not None:
        severity, status = "info", Phrase("divergence.rise.open_slight")
    else:
        severity = "critical" if open_at_end else "warning"
        status = Phrase("divergence.rise.open" if open_at_end else "divergence.rise.recovered")
    return Event(
        kind="divergence",
        severity=severity,
        step=int(steps[onset]),
        end_step=None if open_at_end else int(steps[stop - 1]),
        tag=tag,
        message="divergence.rise",
        args={
            "what": Phrase(f"series.{what}"),
            "status": status,
            "recovered_step": int(steps[stop - 1]),
            "then": Phrase("divergence.rise.slight_then" if slight is not None and last_healthy is not None
                           else "divergence.rise.restart" if last_healthy is not None else "divergence.rise.lower_lr"),
        },
        evidence={
            "best_loss": _level(values, y, best_level),
            "peak_loss": float(values[peak]),
            "peak_step": int(steps[peak]),
            "ratio_to_best": ratio,
            "excess_log": float(excess[peak]),
            "threshold_log": float(threshold),
            "noise_sigma_log": float(sigma),
            "excess_z": float(excess[peak] / sigma),
            "detected_at_step": int(steps[start]),
            "last_healthy_step": last_healthy,
            **(slight or {}),
        },
    )


def _long_spike(steps, values, y, best, tag, what, onset, peak, stop, sigma) -> Event:
    """A sudden jump that took longer than a spike window to recover (a damaging bad batch)."""
    ratio = float(np.exp(y[peak] - best[peak]))
    last_healthy = int(steps[onset - 1]) if onset > 0 else None
    return Event(
        kind="loss_spike",
        severity="warning",
        step=int(steps[onset]),
        end_step=int(steps[stop - 1]),
        tag=tag,
        message="loss_spike.long.restart" if last_healthy is not None else "loss_spike.long",
        args={"what": Phrase(f"series.{what}")},
        evidence={
            "peak_step": int(steps[peak]),
            "peak_value": float(values[peak]),
            "ratio_to_best": ratio,
            "excess_z": float((y[peak] - best[peak]) / sigma),
            "width_points": int(stop - onset),
            "last_healthy_step": last_healthy,
        },
    )


def _left_start(y: np.ndarray, start_level: float, sigma: float, first: int) -> int:
    """First point after the last raw point within ONSET_Z sigma of the start level, up to and
    including `first` (the smoothed curve can be high from its very first point when the rise
    begins within the first few points, so the raw points decide)."""
    near = np.flatnonzero(y[: first + 1] - start_level <= ONSET_Z * sigma)
    return min(int(near[-1]) + 1, y.size - 1) if near.size else 0


def _trend_onset(y, smooth, best, sigma: float, onset: int, start: int, stop: int, settled_from: int) -> int:
    """Where the rise's own straight line leaves the best level (step 4 of the module doc).

    A Theil-Sen line (robust to the spikes a diverging run throws) through the log-loss from
    the ONSET_Z onset `onset` (already inside the rise, if late) to the peak of the smoothed
    excursion, followed back to the best level before it; used only when the line passes
    within ONSET_Z sigma of the smoothed loss at `start`, the first point above the threshold
    (a straight rise: a blow-up that levels off is not). For a steady creep this is unbiased however noisy the loss,
    where the last point within ONSET_Z sigma of the best comes late by the time the creep
    takes to outgrow the noise. For a convex rise (an exponential blow-up) the line lies below
    the curve before `start`, so it never leaves the best level before the curve did.
    """
    peak = start + int(np.argmax(smooth[start:stop]))
    if peak - onset + 1 < TREND_MIN_POINTS:
        return onset
    index = np.arange(onset, peak + 1)
    if index.size > TREND_MAX_POINTS:  # Theil-Sen is quadratic in the points
        index = index[np.linspace(0, index.size - 1, TREND_MAX_POINTS).astype(int)]
    slope, intercept, _, _ = theil_sen(y[index], index)
    if not slope > 0 or abs(intercept + slope * start - smooth[start]) > ONSET_Z * sigma:
        return onset  # not a straight rise (a blow-up that levels off): the line says nothing
    crossing = (best[start] - intercept) / slope
    return int(np.clip(np.ceil(crossing), settled_from, onset))


def _onset(y: np.ndarray, best: np.ndarray, sigma: float, start: int, settled_from: int) -> int:
    """First point after the last one within ONSET_Z sigma of the running best before `start`."""
    near = np.flatnonzero(y[settled_from:start] - best[settled_from:start] <= ONSET_Z * sigma)
    if near.size == 0:
        return settled_from
    return settled_from + int(near[-1]) + 1


def _level(values: np.ndarray, y: np.ndarray, level: float) -> float:
    """The original-unit loss value closest to a log-loss level."""
    return float(values[int(np.argmin(np.abs(y - level)))])
