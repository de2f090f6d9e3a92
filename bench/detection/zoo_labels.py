"""Objective labels of a zoo run, from its raw per-step values (what happened, not what was meant:
an injected corrupted batch counts only where the logged loss shows it, rule 6b).

Notation: `loss`, `grad` are the per-step raw loss and global gradient norm (step k counts from
0, logged as step k+1); `smooth` is the centred running median of the loss over
`W = max(SMOOTH_MIN, steps // SMOOTH_DIVISOR)` steps (NaN-skipping); `initial` is the median of
the first `W` finite losses; `final` the median of the last `W` steps.

Rules, in this order (a run may get several kinds):

1. nonfinite: any loss is NaN or +-Inf where the logs can show it (a logged point at that step,
   a mean over a window holding it, or our hooks' non-finite count). Label: the first such
   step.
2. divergence: the run ends non-finite, or `final > DIVERGE_FACTOR * initial`, or
   `final > REBOUND_FACTOR * best` and `final - best > REBOUND_MIN_SHARE * initial`, where
   `best` is the least `smooth` before the end window (a run that learned and lost a material
   part of it: a classifier at 1e-5 that ends at 1e-3 rebounded 100x and lost nothing), or the
   run climbed back: `held < initial`, `final - held > CLIMB_BACK_SHARE * (initial - held)` and `final - held >
   REBOUND_MIN_SHARE * initial`, where `held` is the best level the run held for a tenth of
   its steps (the least running median over `n // 10` steps before the end window, not one
   lucky stretch): it ends nearer its untrained loss than its best and has lost a material
   part of it (issue 14: coming back to the initial loss is not a recovery; the detector's
   `climb_back.py` states the same rule on logged points), or the run went through weights
   worse than their initialisation for longer than a spike: `smooth` above `DIVERGE_FACTOR`
   times the untrained level (rule 5's start: the lower of `initial` and the first finite
   loss) for more than `W` consecutive steps holding more than `SUSTAINED_POINTS` = 8 logged
   points, whatever came after (issue 14: an excursion far above the start is a divergence
   whether or not it recovers; the end test above is the same factor at the end alone). A
   rise of a few logged points cannot be told from a spike in the logs (the spike detector's
   widest spike, `MAX_WIDTH_POINTS`, is 8 points), and an early blow-up inside the first one
   or two logging intervals shows as one or two points: those are not labelled by this clause,
   nor the part of a stretch up to its last NaN or Inf step (the values around an overflow are
   part of that numerical failure, rule 1's event, as in the detector's `same_event`: only the
   finite steps after it count), nor one in a
   log whose first point already stands above that line (it shows no start to
   rise from: a Trainer logging every 10th step from step 10 after a blow-up in the first 10).
   Onset: where `smooth` is least before it first exceeds
   `ONSET_FACTOR` times its running minimum (or turns non-finite); 0 when it never was lower.
   A divergence is a "slow creep" when its loss rises, taking more than `CREEP_SHARE` of the
   run from the onset to that crossing. A crossing into NaN/Inf is no creep, however long
   the loss lay flat before it: a flat loss's least point is anywhere in the flat stretch,
   and the run did not creep, it blew up.
3. exploding_gradients: the running median of the finite log10(grad) rises `EXPLODE_DECADES`
   above its median over the first `W` steps (above where it started, not above a low it
   reached by converging: a classifier near zero loss has tiny gradients that grow back by
   decades on its hard batches). A gradient that overflows to Inf with the loss turning NaN
   the next step is rule 1's business, not this one. Nor is a rise the run learned through:
   when the loss over the rise (its first to its last step with the level up) is lower than
   over the `W` steps before it by at least `LEARNING_MIN_DROP` (5%) and significantly
   (one-sided Mann-Whitney U, p < `LEARNING_P`), with a non-finite loss worse than any, the
   norm grew as the run left a plateau or its flat start, which is healthy (the detector's
   definition, `gradient_norms`, with the same constants and the literature there). Only runs
   whose logs carry a gradient norm (`cases_zoo.GRAD_NORM_PATHS`) get this label or rule 4's
   global one, and this one only when a logged point of the rise shows a finite norm
   `EXPLODE_DECADES` up (a blow-up inside the first logging interval shows only as NaN): a
   rise nobody logged is no miss, as for spikes. Nor one in a log whose first norm is not
   finite or already stands `EXPLODE_DECADES` up, as rule 2 says of the loss: it shows no start
   to rise from (a Trainer logging every 20th step at a learning rate of 4: 1.7e12 at step 20,
   NaN after; rule 1 and the divergence report that event). Label: the first step of the rise.
4. vanishing_gradients: gradients too small to train some of the weights, one kind with
   three named sub-causes (the same the detectors report, and what the "mindspore" family's
   deep sigmoid nets are labelled for):
   - global: the median gradient norm of the second half is below `VANISH_FLOOR` while the
     loss has not converged (`final > NOT_CONVERGED * initial`);
   - depth (where the logs carry per-layer norms, `layer_vanishing`): the first third of the
     layers gets `DEPTH_DECADES` (1000x) less gradient than the last third, in the median
     over the logged points after the first tenth: the signal dies on its way back, and
     under SGD those layers learn 1000x slower than the rest;
   - dead: a layer whose gradient norm is exactly zero at half or more of those points (it
     receives nothing, so no optimiser can train it: dead ReLUs, float16 underflow).
   Both over the logged points whose loss is finite: where the loss is NaN or Inf the step's
   gradients are rule 1's event, whatever each layer's norm reads (a float16 MLP whose gradient
   norm went NaN at step 130 of 2,491 and stayed so logged exactly zero for its first five
   layers from there: "dead layers" by those points, a run that blew up by its finite ones).
   One rule on one definition for both: labelling the zoo by the global floor alone counted
   the depth and dead-layer findings on zoo runs as false alarms, while the same findings on
   the "mindspore" family's sigmoid stacks were labelled hits. Label: step 1.
5. stalled_convergence (only when rule 2 does not hold: a run that diverged is not "stalled";
   a NaN the run recovered from does not make a stuck run learn): over the stretch trained at
   a high rate the loss did not improve, while still far from converged. The stretch runs from
   the end of the first transient (`TRANSIENT_SHARE` of the run, or later where a warm-up
   reaches `WARMUP_REACHED_SHARE` of the peak rate) to the first step whose rate falls under
   `HIGH_RATE_SHARE` of the peak (the end when it never does): a loss that flattens under a
   planned anneal is not stalled. "Did not improve": the change of the log-loss along a
   Theil-Sen line through every finite step of the stretch is above -log(1 + `STALL_GAIN`)
   (it fell by less than 5% over the stretch, or rose); "far from converged": the median of
   the stretch's last tenth is above `NOT_CONVERGED` times the start, the lower of `initial`
   and the first finite loss. A loss that rose there, by less than rule 2 calls a divergence,
   learned nothing either: the rule once asked the change to lie within +-5%, and a run that
   sat at chance level while its loss crept up 5-10% (a ReLU net whose layers had died, at
   2.2-2.5 against its start of 2.08; a ReLU net under Adam at 0.11, +9% at a constant rate)
   was then labelled healthy or undetermined, and the detector, asking the same, stayed silent
   on it.
   The first loss is computed before any update: it is the untrained model's. A run whose
   first updates blew it up (Adam at a rate of 0.6-0.8: 2.1, then Inf and 10-28 for a dozen
   steps) and that then sat at chance level for the rest of the run learned nothing, yet
   the median of its first steps (10) put chance level (2.2) at a fifth of its "start".
   Label: step 1.
   This is the detector's definition (`stall.py`, "stuck from the start" and its step 5: the
   same statistic over the same stretch, the same 5%, the same half of the start), applied to
   every step instead of the logged points; what the detector adds is what logged points
   need (the evidence of a standard error, enough points, a stretch long enough to tell).
   The rule used to compare the median of 25-50% of the run with that of 5-15% ("no progress
   by the first half"), which called a run stalled that escaped its plateau later and ended
   having learned (zoo_dev_031: 2.08 for 60% of the run, then 1.66), or that learned slowly
   but steadily (7-10% over the run at a learning rate of 1e-5): a user reading the finished
   run sees a run that learned. A slow learner is slow, not stalled; a plateau that the run
   left is over. What the rule does not label is a stall after earlier progress (the
   detector's tail test): telling such a plateau from convergence needs the loss's floor,
   which the zoo's rules do not know.
   Undetermined: where Sen's `STALL_CONFIDENCE` (95%) interval of that change, from every
   step, holds both sides of the 5% line, the run's own losses cannot say which side it is
   on, and a verdict from its logged points (a subset, or means, of those losses) cannot
   either: the benchmark accepts both verdicts for this kind there and scores neither
   (`Case.undetermined`). Such runs learn a few percent in a noisy loss: on the 360 runs of
   three sealed seeds, 36 were undetermined, the detector agreed with the label on 23 of them
   (two in three, where a coin agrees on half), and they held 13 of its 18 stall mistakes; a
   stalled label of -0.6% with an interval of [-1.0%, -0.2%] stays scored, as does a healthy
   one of -5.4% in [-5.9%, -4.8%].
6. loss_spike: a step whose loss is at least `SPIKE_RATIO` times the median of the previous
   `SPIKE_CONTEXT` steps, exceeds it by `SPIKE_MIN_SHARE` of `initial` (material at the scale
   of the run: half of what it started from) and by `SPIKE_MADS` robust deviations of that
   context, is at least `SPIKE_RATIO` times the loss that one step in twenty reached over the
   previous `SPIKE_HISTORY` steps (their `SPIKE_USUAL_QUANTILE` quantile), and after which the median
   of the next `SPIKE_CONTEXT` steps is back under `SPIKE_RECOVERED` times the context median,
   or has given back `SPIKE_GIVEN_BACK` (90%) of the jump (a spike, not the start of a
   divergence: a divergence keeps what it jumped to). The second form is for a context near
   zero, whose median of 20 noisy steps is no stable yardstick: a corrupted batch at 86x a
   context of 0.07, after which the next steps' median was 0.104, 1.53 times the context yet
   99% of the jump given back, was not labelled (zoo_dev_116 at step 94). The quantile
   criterion says "rare": a spike is a loss the run seldom reaches. The robust deviations alone
   could not say it where more than half the context is one value: a float16 classifier whose
   per-step loss is exactly 0 on most batches and 1-5 on one in four has a MAD of 0, and every
   one of its hard batches passed (zoo_dev_050: 11 "spikes" in 20 logged windows, each window's
   maximum 1.5-5.3; nothing in its logs stands out). Up to five spikes in the history leave
   the quantile alone, so a second corrupted batch ten steps after a first is still one.
   Steps in the first `W` steps are not considered. Nor is a jump beside a NaN or Inf step
   (the step before or after it): the update that overflowed made the odd finite values around
   it, one numerical failure that rule 1 labels (the detector's `spikes` step 9 states the same
   on logged points). And a non-finite loss in the steps after a jump counts as one that did
   not come back (the median of the next steps takes it as +Inf): a jump that the run follows
   into NaN for good is the start of that failure, not a spike it recovered from (a float16
   SGD run at 5.3x its context, then 3.2, 2.1, 2.3, 10.1 and Inf to the end; the NaN-skipping
   median had called that recovered).
   A spike is labelled only where the run's logs can show it: the loss logged every step, a
   logged window maximum (our hooks), the spike's own step being a logged point, or an
   interval mean (the Hugging Face way) that the spike lifts by `SPIKE_MEAN_LIFT` (35%) or
   more above the median of the `SPIKE_MEAN_CONTEXT` means before it. 35% is the smallest
   lift of interval means the project is asked to find (issue 14: spikes that lift the logged
   mean by 35-60%); a corrupted batch at 50x a loss of 0.11, averaged over 10 steps, lifted
   its mean 4.3-fold and was once labelled healthy because a mean "cannot show" one step.
   A jump must also stand out of the run's own noise: its log-ratio to the context's median at
   least `SPIKE_NOISE_Z` (4.26) robust sds of the per-step log-noise over the previous
   `SPIKE_HISTORY` steps, taken around the log-loss's `NOISE_WINDOW`-step running median
   (`log_residuals`, the spread `log_noise` summarises): a one-sided Gaussian tail of 1e-5 a step. The
   thresholds above are in the loss's own units, and noise wide enough passes them by chance:
   fed stationary log-normal noise and nothing else (`bench/detection/label_null.py`, stop 50),
   this rule labelled 0.7 steps in 1,000 at a log-noise sd of 0.5, 4.6 at 0.8, 9.2 at 1, 27 at 2
   and 36 at 3, each a label on noise; with the test, at most 0.4 at any of them. (Student-t(3)
   log-noise of the same scale still passes at 1.5-11.5 in 1,000, where it passed at 1.5-45: its
   tail is heavier than the test assumes.) Around the running median, not over the raw log-loss
   of those steps: a run's fall over them is no noise (zoo_seen24_094, a corrupted batch 7.9x
   above its context while the loss still fell: the raw spread, 0.56, asked 11x). A context
   at zero has no log spread: there the tests above decide, and a jump must rise above it (a
   loss at exactly 0 meets "twice its context" and "half the initial loss" when both are 0:
   zoo_seen28_117, float32 at Inf or 0 from its second step, had 32 spike labels at 0). On the tuning splits (dev,
   holdout, seen22 to seen26) this removed 43 of 113 spike labels; the detector had found one
   of them, inside an excursion it reported with another label (zoo_dev_116 at step 160: a
   corrupted batch ten steps after another, in log-noise of 0.69, where a jump needs 19x; rule
   6b, whose 20-point context then holds the first batch, does not label it either). README,
   "the zoo's spike rule judged against the run's own noise".

6b. loss_spike, injected: a corrupted batch the zoo injected (`cases_zoo`: shuffled inputs at
   a large scale, random labels) is a spike wherever the logged loss shows it, whatever rule 6
   says of its size: the first logged point at or after it (the point of its own step, the
   window maximum or the interval mean holding it, or the first point of its aftermath when
   its step was not logged) stands `INJECTED_LIFT` (35%, the smallest spike the project is
   asked to find) above the `INJECTED_QUANTILE` quantile of the `INJECTED_CONTEXT` logged
   points before it (so above nearly all of them: visible against the run's noise; strictly
   above, so that a point equal to a context at 0 shows nothing), the
   points beside it are finite (else rule 1's event) and the median of the
   `INJECTED_CONTEXT // 2` logged points after it came back as rule 6 asks (under
   `SPIKE_RECOVERED` times the median of the points before, or `SPIKE_GIVEN_BACK` of the jump
   given back: a spike, not the start of a divergence). Batches in the first `W` steps
   are not considered, as in rule 6. Rule 6 asks a natural spike to double its context and to
   add half the initial loss, so that a converged classifier's hard batches are no spikes; an
   injected batch is an event whatever its size, and 28 of them on the 1,136 tuning runs
   (stop 39) lifted the logged loss 1.4-3.8x (one 1e4x) above the median of the points before
   it without rule 6 labelling them: a jump under twice its context, a converged loss, an
   aftermath seen only at the next logged point. Label: that logged step.

7. throughput (only where the logs carry step times: our hooks' paths): the running median of
   the step time over a quarter of the run exceeds `SLOWDOWN` times its median over the first
   quarter (after the first `W` steps: compilation). The zoo trains on a shared machine whose
   load swings, so sustained slowdowns happen for real; only a doubling held for a quarter of
   the run is labelled (an alarm on a shorter burst counts as a false one), and only when the
   time it lost (the excess over the first quarter's median, summed from its first step) is at
   least `SLOWDOWN_MIN_SECONDS` and `SLOWDOWN_MIN_SHARE` of the run's time: the project's
   alarm policy (README, `throughput`), since a slowdown that cost a few seconds of a short run
   is not worth an alarm. The zoo's trainings last seconds, so this rarely holds: there the
   kind mostly measures false alarms. Label: its first step.

Anything else is healthy. Why these values: a cross-entropy over 8 classes starts near
ln 8 = 2.08 and a working run ends well below it; doubling it (DIVERGE_FACTOR) cannot happen by
noise of a median over W steps, nor can a 5x rebound from the best level. A gradient norm under
1e-6 moves no weight at any usable rate (updates of lr * 1e-6 with lr <= 1). 5% over the
high-rate stretch is far less than any working optimiser gains there (the healthy runs of the
zoo gain 30-95%). A spike must add half the initial loss: a converged classifier's hard
batches reach 0.1-0.3 against a context near 0 (100x, yet no fault), a corrupted batch adds
several times the initial loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.stats import mannwhitneyu

from tb_health_plugin.analysis.detectors.robust import robust_sigma
from tb_health_plugin.analysis.detectors.robust_levels import runs_of_true
from tb_health_plugin.analysis.detectors.spikes import TREND_WINDOW

SMOOTH_MIN = 5
SMOOTH_DIVISOR = 50
DIVERGE_FACTOR = 2.0
SUSTAINED_POINTS = 8  # rule 2: a rise above twice the start over more logged points than a spike
REBOUND_FACTOR = 5.0
REBOUND_MIN_SHARE = 0.25
CLIMB_BACK_SHARE = 0.5
ONSET_FACTOR = 2.0
CREEP_SHARE = 0.10
EXPLODE_DECADES = 2.0
LEARNING_MIN_DROP = 0.05
LEARNING_P = 0.01
VANISH_FLOOR = 1e-6
DEPTH_DECADES = 3.0
DEAD_SHARE = 0.5
NOT_CONVERGED = 0.5
STALL_GAIN = 0.05
STALL_CONFIDENCE = 0.95  # Sen's interval of rule 5's change: outside it the label is undetermined
TRANSIENT_SHARE = 0.10  # the detector's default warm-up (schedule.DEFAULT_WARMUP_SHARE)
WARMUP_REACHED_SHARE = 0.95  # as schedule.WARMUP_REACHED_SHARE
HIGH_RATE_SHARE = 0.5  # as schedule.HIGH_LR_SHARE
SPIKE_RATIO = 2.0
SPIKE_CONTEXT = 20
SPIKE_MIN_SHARE = 0.5
SPIKE_MADS = 10.0
SPIKE_RECOVERED = 1.5
SPIKE_GIVEN_BACK = 0.9
SPIKE_HISTORY = 100
SPIKE_USUAL_QUANTILE = 0.95
# rule 6: a jump at least this many robust sds of the run's recent log-noise above its context
# (one-sided Gaussian tail 1e-5 a step: `bench/detection/label_null.py`)
SPIKE_NOISE_Z = 4.26
SPIKE_MEAN_LIFT = 0.35
SPIKE_MEAN_CONTEXT = 5
INJECTED_LIFT = 1.35  # rule 6b
INJECTED_CONTEXT = 20
INJECTED_QUANTILE = 0.95
SLOWDOWN = 2.0
SLOWDOWN_MIN_SECONDS = 60.0
SLOWDOWN_MIN_SHARE = 0.05


def smoothing_window(steps: int) -> int:
    """`W` of the module doc: the steps of `smooth`'s running median and of `initial`."""
    return max(SMOOTH_MIN, steps // SMOOTH_DIVISOR)


def running_median(values: np.ndarray, window: int) -> np.ndarray:
    """Centred NaN-skipping running median (the ends use the part of the window that exists)."""
    n = values.size
    half = window // 2
    padded = np.concatenate([np.full(half, np.nan), values, np.full(window - 1 - half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)[:n]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmedian(windows, axis=1)


NOISE_WINDOW = TREND_WINDOW  # the spike detector's trend window, in steps here
NOISE_MIN_STEPS = 60


def log_noise(loss: np.ndarray) -> float | None:
    """The run's per-step noise: the robust sd (`robust.robust_sigma`) of the log-loss around its centred
    running median over `NOISE_WINDOW` steps, after the first tenth of the run (the fast early
    fall is not noise); None with fewer than `NOISE_MIN_STEPS` finite positive steps. Not a
    label: the benchmark reports the zoo's spike events by it, because rule 6 is a rarity rule
    (twice the 95% quantile of the previous steps), which wide noise passes by chance."""
    usable = np.isfinite(loss) & (loss > 0)
    if usable.sum() < NOISE_MIN_STEPS:
        return None
    y = np.log(loss[usable])
    return robust_sigma((y - running_median(y, NOISE_WINDOW))[y.size // 10:])


def label_run(loss: np.ndarray, grad: np.ndarray, visible_step,
              step_time: np.ndarray | None = None, lr: np.ndarray | None = None,
              grad_shown: np.ndarray | None = None) -> tuple[dict[str, list[int]], bool]:
    """(kind -> labelled logged steps, slow creep?) for one run.

    `visible_step(k, persistent)` maps the raw step index k to the logged step where the logs
    show it, or None when its logging cannot show a one-step event there. `step_time`: the
    per-step seconds, when the run's logs carry step times. `lr`: the rate each step used (a
    constant rate when not given). `grad_shown`: which raw steps' gradient norms the logs carry
    (default: every step's).
    """
    n = loss.size
    window = smoothing_window(n)
    finite = np.isfinite(loss)
    labels: dict[str, list[int]] = {}
    creep = False

    def logged(k: int) -> int:
        step = visible_step(k, persistent=True)
        return int(step)

    if not finite.any():
        return {"nonfinite": [logged(0)], "divergence": [logged(0)]}, False
    safe = np.where(finite, loss, np.nan)
    smooth = running_median(safe, window)
    initial, untrained = start_levels(safe)
    shown = [visible_step(int(k), persistent=False, nonfinite=True) for k in np.flatnonzero(~finite)]
    shown = [step for step in shown if step is not None]
    if shown:
        labels["nonfinite"] = [min(shown)]
    tail = safe[-window:]
    final = float(np.nanmedian(tail)) if np.isfinite(tail).any() else np.inf
    ends_bad = not finite[-1]
    head = smooth[: max(1, n - window)]
    best = float(np.nanmin(head)) if np.isfinite(head).any() else initial
    rebound = final > REBOUND_FACTOR * best and final - best > REBOUND_MIN_SHARE * initial
    held = running_median(safe, max(window, n // 10))[: max(1, n - window)]
    held_best = float(np.nanmin(held)) if np.isfinite(held).any() else initial
    lost = final - held_best
    learned = initial - held_best
    climbed_back = learned > 0 and lost > CLIMB_BACK_SHARE * learned and lost > REBOUND_MIN_SHARE * initial
    first_logged = min(logged(0) - 1, n - 1)  # the raw step of the first logged point
    worse_than_init = bool(safe[first_logged] <= DIVERGE_FACTOR * untrained) and any(
        b - a > window and len({logged(k) for k in range(a, b)}) > SUSTAINED_POINTS
        for a, b in after_nonfinite(runs_of_true((smooth > DIVERGE_FACTOR * untrained) | ~finite), finite)
    )
    if ends_bad or final > DIVERGE_FACTOR * initial or rebound or climbed_back or worse_than_init:
        onset, crossing = divergence_onset(smooth, finite)
        labels["divergence"] = [logged(onset)]
        creep = crossing - onset > CREEP_SHARE * n and bool(finite[crossing])
    explode = exploding_step(grad, window, loss, grad_shown)
    if explode is not None:
        labels["exploding_gradients"] = [logged(explode)]
    second = grad[n // 2:]
    second = second[np.isfinite(second)]
    if second.size and np.median(second) < VANISH_FLOOR and final > NOT_CONVERGED * initial:
        labels["vanishing_gradients"] = [logged(0)]
    if _rule5_applies(labels) and stalled(safe, lr, untrained):
        labels["stalled_convergence"] = [logged(0)]
    spikes = [s for s in spike_steps(safe, initial, window) if visible_step(s, persistent=False) is not None]
    if spikes:
        labels["loss_spike"] = sorted({int(visible_step(s, persistent=False)) for s in spikes})
    if step_time is not None:
        slow = slowdown_step(step_time, window)
        if slow is not None:
            labels["throughput"] = [logged(slow)]
    return labels, creep


def after_nonfinite(stretches: list[tuple[int, int]], finite: np.ndarray) -> list[tuple[int, int]]:
    """Each [start, stop) cut to the steps after its last non-finite one (rule 2's last clause)."""
    out = []
    for a, b in stretches:
        bad = np.flatnonzero(~finite[a:b])
        out.append((a + int(bad[-1]) + 1, b) if bad.size else (a, b))
    return out


def high_rate_stretch(lr: np.ndarray | None, n: int) -> tuple[int, int]:
    """Rule 5's stretch [start, end) of step indices: after the first transient and any
    warm-up, up to the first step at a rate under `HIGH_RATE_SHARE` of the peak."""
    start = int(np.ceil(TRANSIENT_SHARE * n))
    if lr is None or not np.isfinite(lr).any() or np.nanmax(lr) <= 0:
        return start, n
    peak = float(np.nanmax(lr))
    start = max(start, int(np.argmax(lr >= WARMUP_REACHED_SHARE * peak)))
    low = np.flatnonzero(lr[start:] < HIGH_RATE_SHARE * peak)
    return start, start + int(low[0]) if low.size else n


@dataclass(frozen=True)
class StallChange:
    """Rule 5's statistic: the log-loss change along the stretch's Theil-Sen line, with Sen's
    `STALL_CONFIDENCE` interval of it, and whether the stretch ends far from converged."""

    change: float
    low: float
    high: float
    far_from_converged: bool

    @property
    def stalled(self) -> bool:
        """Rule 5: the loss did not improve by `STALL_GAIN` (it may have risen), far from converged."""
        return self.change >= -np.log1p(STALL_GAIN) and self.far_from_converged

    @property
    def undetermined(self) -> bool:
        """The interval holds both sides of the 5% line: the run's own every-step loss cannot
        place it on either, so no verdict from its logged points can be scored against it."""
        line = -np.log1p(STALL_GAIN)
        return self.far_from_converged and self.low < line <= self.high


def stall_change(loss: np.ndarray, lr: np.ndarray | None, initial: float) -> StallChange | None:
    """Rule 5's statistic on the per-step loss (NaN where not finite); None when the stretch
    is too short to have one."""
    start, end = high_rate_stretch(lr, loss.size)
    steps = np.arange(start, end, dtype=np.float64)
    values = loss[start:end]
    keep = np.isfinite(values) & (values > 0)
    if keep.sum() < SMOOTH_MIN or end - start < 2:
        return None
    slope, _, low, high = stats.theilslopes(np.log(values[keep]), steps[keep], alpha=STALL_CONFIDENCE)
    span = end - 1 - start
    last = values[-max(1, (end - start) // 10):]
    last = last[np.isfinite(last)]
    far = last.size > 0 and float(np.median(last)) > NOT_CONVERGED * initial
    return StallChange(float(slope) * span, float(low) * span, float(high) * span, bool(far))


def stalled(loss: np.ndarray, lr: np.ndarray | None, initial: float) -> bool:
    """Rule 5 on the per-step loss (NaN where not finite)."""
    change = stall_change(loss, lr, initial)
    return change is not None and change.stalled


def stalled_run(loss: np.ndarray, lr: np.ndarray | None) -> bool:
    """Rule 5 alone, on a loss series (NaN where not finite) with its rate."""
    change = _run_stall_change(loss, lr)
    return change is not None and change.stalled


def undetermined_kinds(labels, loss: np.ndarray, lr: np.ndarray | None) -> frozenset[str]:
    """The kinds of `label_run`'s `labels` that this run's own data cannot decide: rule 5's
    stall, where it applies (no divergence labelled) and its interval holds both sides of the
    line (the "Undetermined" paragraph of the module doc)."""
    if _rule5_applies(labels) and stall_undetermined(loss, lr):
        return frozenset({"stalled_convergence"})
    return frozenset()


def _rule5_applies(labels) -> bool:
    """Rule 5 judges only runs that rule 2 did not call diverged."""
    return "divergence" not in labels


def stall_undetermined(loss: np.ndarray, lr: np.ndarray | None) -> bool:
    """Whether rule 5 cannot tell this run's stall from progress at its own resolution (the
    "Undetermined" paragraph of the module doc)."""
    change = _run_stall_change(loss, lr)
    return change is not None and change.undetermined


def _run_stall_change(loss: np.ndarray, lr: np.ndarray | None) -> StallChange | None:
    """Rule 5's statistic for a whole run, from its own untrained level."""
    safe = np.where(np.isfinite(loss), loss, np.nan)
    levels = start_levels(safe)
    return None if levels is None else stall_change(safe, lr, levels[1])


def start_levels(loss: np.ndarray) -> tuple[float, float] | None:
    """(`initial`, the untrained level) of a loss (NaN where not finite): the median of its first
    W finite losses, and `untrained_level` of it; None when no loss is finite."""
    finite = loss[np.isfinite(loss)]
    if not finite.size:
        return None
    initial = float(np.median(finite[: smoothing_window(loss.size)]))
    return initial, untrained_level(loss, initial)


def untrained_level(loss: np.ndarray, initial: float) -> float:
    """Rule 5's start: the lower of `initial` and the first finite loss (computed before any
    update, the untrained model's own loss), so that a blow-up in the first steps does not
    raise where the run started."""
    finite = loss[np.isfinite(loss)]
    return min(initial, float(finite[0])) if finite.size else initial


def slowdown_step(step_time: np.ndarray, window: int) -> int | None:
    n = step_time.size
    base = step_time[window: max(window + 1, n // 4)]
    base = base[np.isfinite(base)]
    if not base.size:
        return None
    level = running_median(step_time, max(SMOOTH_MIN, n // 4))
    typical = float(np.median(base))
    slow = level[window:] > SLOWDOWN * typical
    if not slow.any():
        return None
    onset = int(np.argmax(slow)) + window
    lost = float(np.nansum(np.maximum(step_time[onset:] - typical, 0.0)))
    if lost < SLOWDOWN_MIN_SECONDS or lost < SLOWDOWN_MIN_SHARE * float(np.nansum(step_time)):
        return None
    return onset


def divergence_onset(smooth: np.ndarray, finite: np.ndarray) -> tuple[int, int]:
    """(onset, crossing): the crossing is the first step where the smoothed loss stands
    ONSET_FACTOR above its running minimum or the loss turns non-finite; the onset is the least
    smoothed loss before it."""
    level = np.where(np.isfinite(smooth), smooth, np.inf)
    running_min = np.minimum.accumulate(np.where(np.isfinite(level), level, np.inf))
    crossed = (level > ONSET_FACTOR * running_min) | ~finite
    crossing = int(np.argmax(crossed)) if crossed.any() else smooth.size - 1
    if crossing == 0:
        return 0, 0
    return int(np.argmin(level[:crossing])), crossing


def exploding_step(grad: np.ndarray, window: int, loss: np.ndarray | None = None,
                   shown: np.ndarray | None = None) -> int | None:
    """Rule 3: the first step of the rise, or None (also when `loss` shows the run learned through
    it, when no step the logs carry (`shown`) has a finite norm up by `EXPLODE_DECADES`, or when
    the first one they carry is not finite or already that far up)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log10(np.where(np.isfinite(grad) & (grad > 0), grad, np.nan))
    level = running_median(logs, window)
    start = logs[:window][np.isfinite(logs[:window])]
    if not start.size or not np.isfinite(level).any():
        return None
    start_level = float(np.median(start))
    with np.errstate(invalid="ignore"):
        above = level - start_level >= EXPLODE_DECADES
    if not above.any():
        return None
    rise = int(np.argmax(above))
    end = int(np.flatnonzero(above)[-1]) + 1  # the excursion: to the last step the level stands up
    span = slice(max(0, rise - window // 2), end + window // 2)  # the steps the centred level read
    if shown is not None:
        up = np.isfinite(logs[span]) & (logs[span] - start_level >= EXPLODE_DECADES)
        if not np.any(up & shown[span]):
            return None  # the rise happened between logged points: the logs cannot show it
        first = int(np.argmax(shown))  # some step is shown: the rise's, at least
        if not np.isfinite(grad[first]) or logs[first] - start_level >= EXPLODE_DECADES:
            return None  # the first logged norm is already up: the logs show no start (rule 3)
    if loss is not None and learned_through(loss, rise, end, window):
        return None
    return rise


def learned_through(loss: np.ndarray, start: int, stop: int, window: int) -> bool:
    """The loss over steps [start, stop) at least `LEARNING_MIN_DROP` and significantly below its
    `window` steps before `start`; a non-finite loss is worse than any finite one."""
    before = np.asarray(loss[max(0, start - window):start], dtype=np.float64)
    during = np.asarray(loss[start:stop], dtype=np.float64)
    if not before.size or not during.size or not np.isfinite(during).all() or not np.isfinite(before).any():
        return False
    before = np.where(np.isfinite(before), before, np.inf)
    reference = float(np.median(before[np.isfinite(before)]))
    if reference - float(np.median(during)) < LEARNING_MIN_DROP * abs(reference):
        return False
    return bool(mannwhitneyu(during, before, alternative="less").pvalue < LEARNING_P)


def spike_steps(loss: np.ndarray, initial: float, window: int) -> list[int]:
    out = []
    residual = log_residuals(loss)
    for k in range(max(window, SPIKE_CONTEXT), loss.size - 1):
        context = loss[k - SPIKE_CONTEXT:k]
        context = context[np.isfinite(context)]
        after = loss[k + 1:k + 1 + SPIKE_CONTEXT]
        after = np.where(np.isfinite(after), after, np.inf)  # a NaN or Inf step did not come back
        if context.size < SPIKE_CONTEXT // 2 or not np.isfinite(loss[k - 1:k + 2]).all():
            continue  # too little context, or beside a NaN/Inf step (rule 1's event)
        centre = float(np.median(context))
        mad = 1.4826 * float(np.median(np.abs(context - centre)))
        excess = loss[k] - centre
        history = loss[max(0, k - SPIKE_HISTORY):k]
        usual_high = float(np.quantile(history[np.isfinite(history)], SPIKE_USUAL_QUANTILE))
        if (excess > 0 and loss[k] >= SPIKE_RATIO * centre and excess >= SPIKE_MIN_SHARE * initial
                and excess >= SPIKE_MADS * mad and loss[k] >= SPIKE_RATIO * usual_high
                and _recovered(float(np.median(after)), centre, excess)
                and _beyond_noise(float(loss[k]), centre, residual[max(0, k - SPIKE_HISTORY):k])):
            out.append(k)
    return out


def log_residuals(loss: np.ndarray) -> np.ndarray:
    """The log-loss around its centred running median over `NOISE_WINDOW` steps, in place (NaN
    where the loss is not finite and positive, and the median skips those steps), so that each
    step's recent noise is the residuals just before it. `log_noise` summarises the same spread
    for a whole run over the finite positive steps taken together (a NaN or a zero shifts its
    windows by one step there: the two can differ in runs that overflow or reach 0)."""
    positive = np.isfinite(loss) & (loss > 0)
    logs = np.full(loss.size, np.nan)
    logs[positive] = np.log(loss[positive])
    return logs - running_median(logs, NOISE_WINDOW)


def _beyond_noise(value: float, centre: float, recent_residuals: np.ndarray) -> bool:
    """Rule 6's noise test: the jump's log-ratio to its context's median is at least
    `SPIKE_NOISE_Z` robust sds of the recent detrended log-noise (`log_residuals` over the previous
    `SPIKE_HISTORY` steps). Fewer than `SPIKE_CONTEXT` / 2 of them: no test (too little to tell)."""
    recent = recent_residuals[np.isfinite(recent_residuals)]
    if recent.size < SPIKE_CONTEXT // 2:
        return True
    if value <= 0 or centre <= 0:
        return True  # a context at zero: the ratio tests above decide (the log has no spread there)
    return bool(np.log(value / centre) >= SPIKE_NOISE_Z * robust_sigma(recent))


def injected_spikes(shown: np.ndarray, logged: np.ndarray, injected: list[int], window: int) -> list[int]:
    """Rule 6b: the logged steps at which the logs show an injected corrupted batch. `shown` is
    the loss as logged at the `logged` steps (points, window maxima or interval means);
    `injected` the raw step indices k of the corrupted batches (step k is logged as k + 1)."""
    out = []
    for k in injected:
        index = int(np.searchsorted(logged, k + 1))
        if k < window or index >= shown.size or index == 0:
            continue
        if not np.isfinite(shown[max(0, index - 1):index + 2]).all():
            continue  # beside a NaN or Inf: rule 1's event
        before = shown[max(0, index - INJECTED_CONTEXT):index]
        after = shown[index + 1:index + 1 + INJECTED_CONTEXT // 2]
        after = np.where(np.isfinite(after), after, np.inf)  # a NaN or Inf did not come back
        before = before[np.isfinite(before)]
        height, centre = float(shown[index]), float(np.median(before))
        usual = float(np.quantile(before, INJECTED_QUANTILE))
        if height > usual and height >= INJECTED_LIFT * usual and (
                not after.size or _recovered(float(np.median(after)), centre, height - centre)):
            out.append(int(logged[index]))
    return out


def lifts_mean(means: np.ndarray, index: int) -> bool:
    """Rule 6's visibility in interval means: the mean at `index` stands `SPIKE_MEAN_LIFT` above
    the median of the `SPIKE_MEAN_CONTEXT` finite means before it."""
    context = means[max(0, index - SPIKE_MEAN_CONTEXT):index]
    context = context[np.isfinite(context)]
    if not context.size or not np.isfinite(means[index]):
        return False
    centre = float(np.median(context))
    return bool(means[index] > centre and means[index] >= (1 + SPIKE_MEAN_LIFT) * centre)


def _recovered(after: float, centre: float, excess: float) -> bool:
    """Rule 6's recovery: back under `SPIKE_RECOVERED` times the context, or most of the jump given back."""
    return after < SPIKE_RECOVERED * centre or after - centre <= (1 - SPIKE_GIVEN_BACK) * excess


def layer_vanishing(layer_norms: list[np.ndarray], finite_loss: np.ndarray | None = None) -> bool:
    """Rule 4's depth and dead-layer sub-causes, from per-layer gradient norms in depth order
    (one array per layer, aligned on the logged points), judged at the points where
    `finite_loss` (when given, aligned the same way) is True."""
    if not layer_norms:
        return False
    norms = np.vstack(layer_norms).astype(np.float64)
    if finite_loss is not None:
        norms = norms[:, np.asarray(finite_loss, dtype=bool)]
    settled = norms[:, norms.shape[1] // 10:]
    if not settled.size:
        return False
    if np.any(np.mean(settled == 0, axis=1) >= DEAD_SHARE):
        return True
    if len(layer_norms) < 3:
        return False
    third = max(1, len(layer_norms) // 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log10(np.where(np.isfinite(settled) & (settled > 0), settled, np.nan))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            gap = np.nanmedian(logs[:third], axis=0) - np.nanmedian(logs[-third:], axis=0)
            return bool(np.isfinite(gap).any() and np.nanmedian(gap) <= -DEPTH_DECADES)
