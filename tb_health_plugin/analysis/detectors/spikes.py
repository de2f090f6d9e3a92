"""Loss spikes: short excursions of the loss above its local trend that noise does not explain.

Logged losses come in three kinds, and one method covers them: single per-step values (noisy,
heavy-tailed), interval means (the Hugging Face way: each point the mean of the last N steps,
so a spike lifts several points by a moderate amount in very low noise) and window maxima (our
hooks' `train/loss_max`, an extreme-value statistic). Each series is judged against its own
noise: a window maximum against the run's other window maxima (the trend is their running
median, the noise their spread and tail: the extreme-value distribution of that window size as
this run shows it), never against the mean loss.

1. Work on the log of the loss (`robust.log_loss`), so a spike's size is a ratio at any level.
2. Trend: a centred running median over `TREND_WINDOW` = 4 * `MAX_WIDTH_POINTS` + 1 = 33
   logged points. A running median keeps the step drops of a learning-rate schedule and
   passes under an excursion shorter than half its window; at four spike widths it is lifted
   little by a plateau of `MAX_WIDTH_POINTS` (8 of 33 points raise the median by about 0.25
   noise sd, against about 1 sd with a 17-point window, which hid +35-60% plateaus in noise).
3. Noise: residual / local MAD (running median of |residual| over `NOISE_WINDOW` = 8 trend
   windows, long enough that no spike moves it, short enough to follow noise that shrinks as
   the loss falls; never below half the run's MAD), a robust z-score for this stretch. That
   floor's MAD is the larger of the residuals' and the one the second differences show
   (`second_difference_mad`: y[i-1] - 2 y[i] + y[i+1] spreads sqrt(6) times as wide as
   independent Gaussian noise, wider for heavier tails and negative autocorrelation, and holds
   nothing of a locally straight trend). Where the noise is smaller than the fall between two
   logged points, the logged points are monotone and a running median passes through them:
   their residuals are exactly 0, and so was the MAD of a whole short log (zoo_seen16_089, 56
   points every 5 steps of a loss falling from 2.1 to 0.08, its upper half monotone), so that
   its ordinary late wiggles of 1.5x came out at z of 430,000 and were reported as spikes on a
   healthy run. The second differences see that noise. The floor only ever lowers z-scores,
   and on stationary noise it seldom binds: on the falling curves of `bench_spike_null.py`
   (100 and 1,000 points, log-noise 0.1), at 0.2% of the points for Gaussian noise, 0.6% for
   t3, 1.5% for t2, none for AR(1) at +0.5 or +0.9, 1.3% at -0.5 and 12% at -0.9 (strongly
   alternating noise, whose second differences are 1.6x the residuals' spread). Taken for the
   run's MAD itself it moved ordinary runs: the 50-step means of spl_dev_mean50_spikes_10 have
   second differences 15% wider than sqrt(6) times their residuals, enough to lose a labelled
   +40% lift.
4. Leave the excursions out (masking): a first spike must not inflate the noise model and hide
   the next ones. The trend, the MAD, the tail fit and the autocorrelation are re-estimated
   without the points of the excursions found so far (and one neighbour each side), until the
   set stops changing (`MAX_PASSES` = 4; it settles in 2-3). Every pass also screens for
   clusters (`SCREEN_WIDTHS` 2-4 consecutive points each beyond the level one point passes with
   probability `SCREEN_WINDOW_P` ** (1 / w) under the default t3 tail, and windows whose
   level-shift statistic (step 6, calibrated without the points left out so far) passes at
   `SCREEN_WINDOW_P`); the screened points stay left out: independent noise forms such a
   window with probability `SCREEN_WINDOW_P` = 1e-4, so a healthy run loses a handful of points
   per pass at most from its noise estimate, while spikes, whose points come in runs, no longer
   fatten the fitted tail (three 2-point spikes in a 300-point run of interval means made the
   fit choose nu = 1.5 and explained themselves away). The screen is repeated because the first
   pass's noise still holds every spike: of three equal +45% plateaus in a noisy log, only the
   first passed it, and the other two, kept in the null distribution of step 6, raised its
   threshold above themselves.
   Autocorrelation is estimated from MADs (`robust_lag1_autocorrelation`), which plateaus do
   not inflate.
5. Sharp spikes, a Fisher scan: each point above the trend gets its tail probability p under a
   Student-t fitted to the run's own residuals (`robust.fit_noise_tail`; minibatch noise is
   heavy-tailed); a window of w consecutive points above the trend, w in `WIDTHS`, is
   significant when the sum of -log p exceeds the Gamma(w) quantile at level
   `ALPHA` * `FISHER_SHARE` / (n * len(`WIDTHS`)) (Fisher's method; Bonferroni over all windows
   of the run). Autocorrelated residuals (lag-1 rho) count as w (1 - rho) / (1 + rho)
   independent points (Brown's correction).
6. Sustained lifts, a level-shift scan (a scan statistic of CUSUM type): the sum of clipped
   z-scores over w points, w in `LEVEL_WIDTHS`, points below the trend included. Fisher's
   combination is weak here (points 2-3 sds up have p of 0.01-0.05 each); a sum is the
   matched statistic for a shift in level. Its null distribution is the exact w-fold
   convolution of the run's own clipped z-scores (excursions left out, on a `LEVEL_GRID` =
   0.05 grid, the rounding added to the threshold), plus one pseudo-point at the clip
   (small runs have not seen their tail; its weight 1/n vanishes on long runs). Clipping at
   `LEVEL_CLIP_Z` = 6 MADs (4 Gaussian sds) leaves Gaussian noise untouched and caps what one
   heavy-tail point adds. Sums of autocorrelated points are scaled by sqrt((1 - rho) /
   (1 + rho)) (the variance of an AR(1) sum), and by sqrt(1 + w * `TREND_ERROR_VARIANCE`):
   the trend's own error is common to the w points (without it a 200k-point healthy t5 run
   found an 8-point "lift" of 1.5x its noise). Level: `ALPHA` * (1 - `FISHER_SHARE`) /
   (n * len(`LEVEL_WIDTHS`)). Only the points that carry the lift are flagged: above half the
   window's mean lift (the CUSUM reference value k = delta / 2).
   `ALPHA` = 0.01 false alarms per healthy run over both scans (`FISHER_SHARE` = 0.5 each:
   neither shape of spike is favoured), which keeps the share of healthy runs with a false
   spike under 1% even where the tail fit errs, leaving room in the 2% budget for the others.
7. Consecutive points each at least 4x above the trend (`GROSS_SPIKE_LOG`) are candidates even
   when the scans do not find them significant, provided together they are a 0.1%-tail event
   under the fitted tail (`GROSS_SPIKE_WINDOW_P`: the same Fisher combination, without the
   Bonferroni split; near-zero losses make large ratios ordinary, so the ratio alone is not
   enough). On a short run the fitted tail errs on the heavy side, and on a noisy per-step log
   the t3 floor of the fit makes two consecutive points 35x above the trend (a corrupted batch
   in the real MindSpore benchmark runs) a 0.2%-tail event each; a fourfold jump within a few
   points is not minibatch noise in practice. That holds only where the jump is material at the
   scale of the run: each of those points must also exceed the trend by `GROSS_MIN_SHARE` (half)
   of the level the run started from (the median of its first `START_POINTS` logged points, in
   the units of the loss). Near zero a fourfold ratio is ordinary: a converged classifier's hard
   batches reach 0.05-0.1 against a trend of 0.002-0.01 (6-46x, under 5% of the starting loss,
   in real zoo trainings), while a corrupted batch adds several times the starting loss. This is
   the zoo's labelling rule for a spike (`SPIKE_MIN_SHARE`: a spike adds half the initial loss).
   Excursions that the scans find significant need no such size: they are not noise whatever
   their size (above `MIN_SPIKE_LOG`).
7b. Points standing alone (`standing_alone`): the scans ask a point to be improbable under
   the fitted tail scaled by the MAD, and a short run's fit cannot rule out t3 (step 5's t3
   floor), so there a single point needs z of 55-70: corrupted batches lifting an every-step
   log 1.4-1.7x in 1-4% log-noise came out at z of 20-70 and were missed, although each stood
   5-15 times above every other point of its run. This test asks how far the highest points
   stand above the next one, in the run's own units: given the (m+1)-th largest z-score x, the
   m points above it, if noise, are independent draws from the tail beyond x, so the k-th
   largest and the m - k others between it and x all reach X(m) with probability
   (sf(X(m)) / sf(x)) ** (m - k + 1), whatever the points above the k-th are. The k-th largest
   is flagged when that is under `ALONE_ALPHA` / `ALONE_MAX_POINTS` for some m >= k (m up to
   `ALONE_MAX_POINTS`), and so is every point above it (closed testing: "the k-th is noise"
   implies "everything below it is", so each point is judged by its own gap, never carried
   by larger ones: counting all m points as noise found two converged-classifier hard batches
   21x and 60x above the trend significant only because a corrupted batch stood above them).
   The tail is the fitted one or t3, whichever is heavier: a lighter tail fitted to a long
   run's body turns small misfits far out into significance (a 1,772-step float16 CNN, t50
   fitted: its 4th to 6th largest points, z 5.2-6.0 against a 7th of 4.2, came out significant).
   A fit heavier than t3 is made again without the values of the points under test: the
   `ALONE_MAX_POINTS` + 1 largest enter it only as "above the next one" (censored:
   `robust.fit_noise_tail`'s `censor_at_least`), and they do not count towards the 20 points a
   fit needs (`robust.MIN_TAIL_FIT_POINTS`; fewer: t3). Censoring keeps the likelihood right when they are noise (it drops
   only what their exact values say) and stops them from choosing their own null when they are
   not: the scans' fit censors 3% of the points, one on a short log, so two or three corrupted
   batches among 40-90 logged points made it Cauchy (z of 30-220 against 2-4 for every other
   point, in window maxima of zoo_seen_050, zoo_seen6_005 and zoo_seen9_095) and explained
   themselves away, in step 5 and here alike; found here, they are left out of the later
   passes' fit too (step 4). zoo_seen_050's 44 window maxima have 22 points above the trend,
   and the 13 left uncensored still came out Cauchy: hence the 20 points. On the 1,680 tuning
   zoo runs this found 10 more labelled spikes and changed nothing else;
   `bench/bench_spike_null.py` beside the fit with one point censored: 2,482 -> 2,487 of
   16,000 pure-noise runs with a spike warning (one or two more in t3, t2 and window maxima of
   t3), and the converged classifier at 300 points 67 -> 106 of 400 (its hard batches, 10-40x
   above the trend, are the top of its residuals; censored, they no longer make its tail
   heavy: the no-clean-null case below).
   `ALONE_ALPHA` is a quarter of `ALPHA`, on top of the scans' budget. `bench/bench_spike_null.py`
   (healthy synthetic runs, 400 per family and size, 40-5,000 points): on 16,000 runs of
   Gaussian, t5, t3, t2 and AR(1) log-noise, and interval means and window maxima of 10 steps,
   the runs with a spike warning went from 2,472 to 2,482 (the rest come from step 7 in t2-t3
   noise); on 2,000 runs of the converged classifier of the tests (5% hard batches 10-40x above
   the trend from step 150) from 27 to 67, all at 300 points, where those batches add 0.1-1.8
   times the starting loss (72 of the 143 found more than half of it, the zoo label's size of
   a spike: that family is no clean null at 300 points). On the 1,272 tuning zoo runs: 6 more labelled spikes found, one more unlabelled
   one (a corrupted batch 1.34x above the trend, under the label's 35%), no healthy run alarmed
   that was not.
8. An excursion is its core: the stretch of largest sum of z - k within the flagged
   points, k half the mean of its upper half (the CUSUM reference value for the lift the
   excursion shows), so the scans' windows do not stretch it over ordinary points. Its step is
   the core's first point. An excursion that peaks less than 20% above the trend
   (`MIN_SPIKE_LOG`) is not reported, whatever its significance: low-noise logs resolve
   harmless wiggles, and epoch boundaries and data-mixture changes move a loss by that much
   for a few points (the divergence detector's `MIN_RISE` is the same 20%, for the same
   reason). The smallest spikes worth a warning that this project knows of lift interval
   means by 35% (issue 14's Hugging Face-style logs; the zoo's label asks as much of a mean).
   On the labelled benchmark, the excursions found between 10% and 20% were false ones, but
   for one labelled spike that the run's window maxima show at 4.1x. Nor is one whose peak
   does not stand those 20% above the logged point before it (before the excursion's first
   point or its core's, the lower): a spike is a jump from where the loss was, as the zoo's
   labels define it (against the steps or logged points before it) and as the advice to
   restart from the point before it assumes. A running median lags under the upper part of a
   fast fall: zoo_seen18_034 sat at chance level for 150 steps, then fell from 2.0 to 0.05
   within 250, and eight window maxima of that fall stood 1.5x above the trend (z-scores of
   400,000 against the MAD its float16 plateau left), each lower than the point before it. One
   longer than
   `MAX_WIDTH_POINTS` = 8 or still open at the end of the run is not a spike here (the
   divergence detector owns it). Excursions that start during warm-up are `info` only
   (`schedule.warmup_end_step`, at least the first tenth of the steps); the finding says "during
   warm-up" before the logged rate's own warm-up ends, "early in the run" after it or without a
   logged rate. So is one whose peak stays in the converged regime: a loss bounded below by
   zero whose peak stands at or under `stall.CONVERGED_SHARE` (1%) of where the run started
   (`stall.converged`, the line the stall and divergence detectors draw too). There a single
   batch moves the loss by decades on the log scale and by nothing at the scale of the run: a
   classifier at 0.006 whose interval means went to 0.008 for three points (zoo_seen3_122,
   started at 2.09) had a "z-score" of 190,000 against the near-zero spread of its means. The
   finding stays in the report, with the level it started from.
9. An excursion next to a non-finite point (the logged point just before or after one of its
   points is NaN or Inf) is part of that numerical failure, not a spike: the update that
   overflowed also produced the odd finite values around it, and the trend and noise there are
   estimated across the gap. The non-finite check reports the event, with its cause. A logged
   window that held NaN/Inf steps counts as such a point although its own value is finite (our
   hooks' `train/nonfinite_count`: the window's loss and maxima are taken over its finite
   steps): zoo_seen20_016, a float16 run with a non-finite step in the window ending at step
   160, had its window maxima 18x above the trend over the next eight windows, reported as a
   spike beside the non-finite finding. Not where every non-finite value of the window is an
   overflow the loss scaler skipped (`train/overflow_count`; its update was thrown away, the
   rule `trainer_hooks.stopping` stops a run by): that damaged nothing (`checks/loss.py`).
10. A spike is a height the run seldom reaches: an excursion is not reported when the run
   reaches its height routinely in the `NOISE_WINDOW` of logged points around it, at more
   than `ROUTINE_SHARE` (one in twenty) of the positions there, counted as separate stretches
   (runs of consecutive positions). Each excursion is judged in its own shape (`_routine`): a
   plateau (two or more points, all above the trend) by its mean lift against the means of
   as many consecutive points, a single point (or points with ordinary ones between them) by
   its peak against single points; "its height" means within `MIN_SPIKE_LOG` of it, the
   smallest difference this module calls a spike. The scans' noise model, a Student-t around
   the MAD, cannot describe a loss with a point mass: a saturated classifier whose per-batch
   loss is exactly 0 (or under the log shift's floor) on most points and 1e-8 to 9 on one in
   three or four has a MAD at its floor, and its hard batches came out at z of 6,500-1e7;
   they are its noise. On the 1,136 tuning zoo runs (dev, holdout, seen to seen7, long runs
   included) 24 spike warnings went, none came: 18 false ones in four such runs, 4 false ones
   in three runs whose hard batches recur at z of 20-140, and 2 matched labelled spikes in one
   saturated run (where the label's own rarity rule is a coin toss). This is the zoo label's
   rarity rule (`zoo_labels` rule 6: a spike is at least twice the loss one step in twenty
   reached before it) in terms of logged points. Judging a plateau by its single points
   instead lost one of three +35% plateaus in a log with 10% noise (single points reach
   within 20% of its peak at 5.4% of the points; windows of its width almost never do).
   Separate stretches, so that true spikes near each other (three corrupted batches within 22
   points) leave each other rare; where the noise model fits, the scans already ask more.
   Where the run also logs its window maxima (our hooks' `train/loss_max`), they say how often
   the loss reaches a height at every step, where the logged points show one step in ten or
   fifty: a spike of the logged points is routine when the maxima reach it, as many windows in
   a row as it has points, at more than `ROUTINE_SHARE` of the other windows around it
   (`reached_by_window_maxima`, called by `checks/loss.py`). zoo_dev_050, a float16 MLP whose
   per-step loss is about 0 on most batches and 1-5 on many, logged every 10th step: its points
   caught two such batches (1.35 twice, 3.6) where its maxima reach 1-5 in most windows.
11. Short logs. A log needs `MIN_LOG_POINTS` = 12 points after warm-up to be judged at all;
   under `MIN_POINTS` = 24 the tail fit has too few points and the default t3 stands in
   (`robust.MIN_TAIL_FIT_POINTS`), the heaviest tail the scans assume unfitted, and the rest of
   the method is unchanged. The gate was 24: a run of 200 steps logged every 10th step (20
   points) was never judged, and its corrupted batches were missed however large (zoo_seen16_073:
   window maxima of 3.6 and 3.8 against a trend of 0.3 and 0.2; zoo_seen15_002: 8.7 and 7.2
   against 1.0 and 0.6). `bench/bench_spike_null.py --sizes 14 16 18 20 22` (400 healthy runs
   a family and size, 13-21 points after warm-up): no warning on Gaussian, t5, AR(1) or
   Gaussian window-maxima noise; t3 0-1.25% of runs, interval means of t3 0-0.75%, the
   converged classifier 0-0.5%, t2 1.25-5.25% and window maxima of t3 2.25-4.5% (heavy tails,
   step 7's fourfold jumps by design); at 40 points the same families give 0.75%, 1.75%, 0%,
   9.25% and 10%: a short log is judged no less strictly than a long one. Under 12 the first
   logged point may lie outside the warm-up (the first tenth of 10 steps ends at step 1), and a
   falling loss's first point stands above any trend: with the gate at 6, 37-48% of Gaussian
   runs of 9-10 points got a "spike" there.

The tail's MAD shrink (`robust.RESIDUAL_MAD_SHRINK`) was measured for a 17-point median; a
33-point median absorbs less noise, so the z-scores here are 1-2% smaller than that table
assumes: conservative.

Advice: the last logged step before the spike is the last healthy point to restart from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tb_health_plugin.analysis.detectors.robust import (
    DEFAULT_TAIL,
    DEFAULT_TAIL_NU,
    TINY_LOG_SCALE,
    NoiseTail,
    cumulative_sum,
    fit_noise_tail,
    independent_points,
    largest_indices,
    log_loss,
    log_shift,
    loss_units,
    map_blocks,
    robust_lag1_autocorrelation,
    rolling_median,
)
from tb_health_plugin.analysis.detectors.robust_levels import runs_of_true
from tb_health_plugin.analysis.detectors.schedule import Schedule
from tb_health_plugin.analysis.detectors.stall import converged, start_level
from tb_health_plugin.analysis.event import Event, Phrase

ALPHA = 0.01  # expected false spike alarms per healthy run
MAX_WIDTH_POINTS = 8  # the widest excursion still called a spike, in logged points
WIDTHS = (1, 2, 3, 5, 8)  # Fisher-scan windows: about doubling, up to MAX_WIDTH_POINTS
TREND_WINDOW = 4 * MAX_WIDTH_POINTS + 1
NOISE_WINDOW = 8 * TREND_WINDOW
MIN_POINTS = 24  # fewer logged points cannot calibrate a noise tail (the default t3 stands in)
MIN_LOG_POINTS = 12  # fewer settled logged points are not judged at all (module doc, step 11)
# Smallest jump worth a warning, whatever the noise: a loss 20% above its trend for a few points
# costs nothing, and low-noise (interval-averaged) logs resolve much smaller, harmless wiggles
# (module doc, step 8).
MIN_SPIKE_LOG = float(np.log(1.2))
# A jump this large above the trend is a spike whatever the fitted tail says (step 7).
GROSS_SPIKE_LOG = float(np.log(4.0))
GROSS_SPIKE_WINDOW_P = 1e-3  # ... and their window must be a 0.1%-tail event under the fit
GROSS_MIN_SHARE = 0.5  # ... and each point must exceed the trend by half the starting level (step 7)
START_POINTS = 5  # logged points whose median is the level the run started from
FISHER_SHARE = 0.5  # share of ALPHA spent on the Fisher scan; the rest on the level-shift scan
LEVEL_WIDTHS = (2, 3, 5, 8)  # window sizes of the level-shift scan, in logged points
LEVEL_CLIP_Z = 6.0  # z-scores (residual / MAD) are clipped here before summing
LEVEL_GRID = 0.05  # resolution of the convolved distribution, in z units
# Variance of the running-median trend relative to one point's (pi / (2 m) for a median of m):
# an error of the trend is shared by every point of a window, so it adds w^2 times this to the
# variance of a w-point sum (w times one point's variance without it).
TREND_ERROR_VARIANCE = float(np.pi / (2 * TREND_WINDOW))
# Points standing far above all the others (step 7b): a share of the false-alarm budget on top
# of the scans', split over the counts m = 1 .. `ALONE_MAX_POINTS` of outlying points tested.
ALONE_ALPHA = ALPHA / 4
ALONE_MAX_POINTS = MAX_WIDTH_POINTS
SCREEN_WIDTHS = (2, 3, 4)  # window sizes of the first pass's screen, in logged points
SCREEN_WINDOW_P = 1e-4  # chance that a window of noise passes the screen
MAX_PASSES = 4  # noise re-estimations without the excursions found so far
# A spike is a height the run seldom reaches (step 10): at most this share of the logged points
# around it may hold other excursions that come within `MIN_SPIKE_LOG` of its height.
ROUTINE_SHARE = 0.05


def spike_scores(y: np.ndarray, warm: np.ndarray, excluded: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Trend and robust z-scores (residual / local MAD) of a log-loss series.

    `excluded` points (excursions found by an earlier pass) neither shape the trend nor the
    noise scale: the trend runs through them by interpolating their neighbours, and their
    |residual| counts as a typical one in the running MAD (steps 3-4 of the module doc).
    """
    excluded = np.zeros(y.size, dtype=bool) if excluded is None else excluded
    filled = y
    if excluded.any() and (~excluded).sum() >= 2:
        filled = y.copy()
        filled[excluded] = np.interp(np.flatnonzero(excluded), np.flatnonzero(~excluded), y[~excluded])
    trend = rolling_median(filled, TREND_WINDOW, edges="trend")
    del filled  # memory: each whole-series temporary goes as soon as it is used (robust.py)
    residual = y - trend
    absolute = np.abs(residual)
    clean = ~excluded
    settled = absolute[~warm & clean] if (~warm & clean).sum() >= MIN_POINTS else absolute[clean]
    global_mad = float(np.median(settled, overwrite_input=True)) if settled.size else float(np.median(absolute))
    del settled
    if excluded.any():
        absolute[excluded] = global_mad
    local_mad = rolling_median(absolute, NOISE_WINDOW, edges="mirror_within")
    del absolute
    floor = 0.5 * max(global_mad, second_difference_mad(y, warm | excluded))  # module doc, step 3
    scale = np.maximum(local_mad, max(floor, TINY_LOG_SCALE), out=local_mad)
    residual /= scale  # the z-scores
    return trend, residual


def second_difference_mad(y: np.ndarray, left_out: np.ndarray) -> float:
    """The noise's MAD as the second differences y[i-1] - 2 y[i] + y[i+1] show it (module doc,
    step 3): for independent noise they spread sqrt(6) times as wide, and a locally straight
    trend adds nothing to them. 0 with fewer than `MIN_LOG_POINTS` - 2 of them outside
    `left_out` (the shortest log judged has that many)."""
    if y.size < 3:
        return 0.0
    second = np.abs(y[:-2] - 2.0 * y[1:-1] + y[2:])
    usable = ~(left_out[:-2] | left_out[1:-1] | left_out[2:]) & np.isfinite(second)
    if np.count_nonzero(usable) < MIN_LOG_POINTS - 2:
        return 0.0
    return float(np.median(second[usable], overwrite_input=True)) / float(np.sqrt(6.0))


@dataclass(frozen=True)
class ExcursionTest:
    """Fisher's combination of the points' tail probabilities over windows of w points."""

    tail: NoiseTail
    rho: float
    per_test: float  # the false-alarm budget of one window test

    def surprise(self, z: np.ndarray) -> np.ndarray:
        """-log p of each point above the trend (0 for points at or below it)."""
        return map_blocks(lambda part: np.where(part > 0, -self.tail.log_sf(np.maximum(part, 0.0)), 0.0), z)

    def statistic_threshold(self, width: int) -> float:
        """Level of the sum of surprises over `width` points that has probability `per_test`."""
        from scipy import special
        effective = independent_points(width, self.rho)
        return float(special.gammainccinv(effective, self.per_test) * width / effective)


def excursion_test(z_settled: np.ndarray, residual_settled: np.ndarray, points: int,
                   excluded_settled: np.ndarray | None = None) -> ExcursionTest:
    """Calibrate the scan to the run: its noise tail, autocorrelation and length (module doc).

    Points in `excluded_settled` (excursions of earlier passes) are left out of the tail fit and
    the autocorrelation: they are not noise.
    """
    keep = np.ones(z_settled.size, dtype=bool) if excluded_settled is None else ~excluded_settled
    tail = fit_noise_tail(z_settled[keep])
    rho = robust_lag1_autocorrelation(residual_settled[keep])
    return ExcursionTest(tail=tail, rho=rho, per_test=ALPHA * FISHER_SHARE / (max(points, 1) * len(WIDTHS)))


def excursion_mask(z: np.ndarray, test: ExcursionTest) -> np.ndarray:
    """Points above the trend inside a window whose combined surprise is significant."""
    flagged = np.zeros(z.size, dtype=bool)
    cumulative = cumulative_sum(test.surprise(z))  # the surprises go once summed (memory)
    positives = cumulative_sum(z > 0, dtype=np.int32 if z.size < 2**31 else np.int64)
    sums = np.empty(z.size)  # every width's window sums, in turn (memory)
    for width in WIDTHS:
        if z.size < width:
            continue
        window_sum = np.subtract(cumulative[width:], cumulative[:-width], out=sums[: z.size - width + 1])
        all_above = positives[width:] - positives[:-width] == width
        starts = (window_sum >= test.statistic_threshold(width)) & all_above
        if starts.any():
            flagged |= _spread(starts, width, z.size)
    return flagged


def _spread(starts: np.ndarray, width: int, size: int) -> np.ndarray:
    """Every point covered by a window of `width` points starting where `starts` is True."""
    return np.convolve(starts.astype(np.int8), np.ones(width, dtype=np.int8))[:size] > 0


@dataclass(frozen=True)
class LevelShiftTest:
    """A scan for a sustained lift: the sum of clipped z-scores over w points (step 6 of the doc).

    `thresholds[w]` is the level of the centred window sum that the run's own noise exceeds
    with probability `per_test`, from the exact w-fold convolution of the empirical
    distribution of clipped z-scores (excursions left out).
    """

    thresholds: dict[int, float]
    centre: float  # mean of a clipped z-score under the noise
    inflation: float  # variance of a sum over the same of independent points (lag-1 rho)

    def mask(self, z: np.ndarray) -> np.ndarray:
        """Points carrying the lift of a significant window: above half the window's mean lift
        (a CUSUM's reference value, delta / 2), and the dips between such points."""
        clipped = np.clip(z, -LEVEL_CLIP_Z, LEVEL_CLIP_Z)
        clipped -= self.centre
        cumulative = cumulative_sum(clipped)
        reference = np.full(z.size, np.inf)  # lowest delta / 2 of a significant window covering a point
        sums = np.empty(z.size)  # every width's window sums, in turn (memory)
        for width, threshold in self.thresholds.items():
            if z.size < width:
                continue
            window_sum = np.subtract(cumulative[width:], cumulative[:-width], out=sums[: z.size - width + 1])
            spread = np.sqrt(self.inflation * (1 + width * TREND_ERROR_VARIANCE))
            level = threshold + width * LEVEL_GRID / 2  # grid rounding
            significant = map_blocks(lambda part, s=spread, at=level: part / s >= at, window_sum, dtype=bool)
            if not significant.any():
                continue
            half_mean = np.divide(window_sum, 2 * width, out=window_sum)
            half_mean[~significant] = np.inf
            _lower_to_covering_minimum(reference, half_mean, width)
        flagged = (z > 0) & (clipped > reference)
        return flagged | _between(flagged)


def _lower_to_covering_minimum(reference: np.ndarray, values: np.ndarray, width: int) -> None:
    """Lower each point's `reference` to the minimum of `values[s]` over the windows s..s+width-1
    covering it, in place (one shifted minimum per offset: no whole-series temporary)."""
    for offset in range(width):
        covered = reference[offset : offset + values.size]
        np.minimum(covered, values, out=covered)


def _between(mask: np.ndarray) -> np.ndarray:
    """Points that lie between flagged points less than `MAX_WIDTH_POINTS` apart (dips inside
    one excursion keep it whole)."""
    flagged = np.flatnonzero(mask)
    inside = np.zeros(mask.size, dtype=bool)
    for a, b in zip(flagged[:-1], flagged[1:], strict=False):
        if 1 < b - a < MAX_WIDTH_POINTS:
            inside[a + 1 : b] = True
    return inside


def level_shift_test(z_clean: np.ndarray, rho: float, points: int, per_test: float | None = None) -> LevelShiftTest:
    """Calibrate the level-shift scan to the run's clipped z-scores (module doc, step 6).

    `per_test`: the false-alarm chance of one window (default: the run's budget, Bonferroni).
    """
    clipped = np.clip(z_clean[np.isfinite(z_clean)], -LEVEL_CLIP_Z, LEVEL_CLIP_Z)
    bins = int(round(2 * LEVEL_CLIP_Z / LEVEL_GRID)) + 1
    counts = np.bincount(np.rint((clipped + LEVEL_CLIP_Z) / LEVEL_GRID).astype(int), minlength=bins)[:bins]
    counts = counts.astype(np.float64)
    counts[-1] += 1.0  # one pseudo-point at the clip: small runs do not see their own tail
    pmf = counts / counts.sum()
    grid = -LEVEL_CLIP_Z + LEVEL_GRID * np.arange(bins)
    centre = float(np.dot(pmf, grid))
    if per_test is None:
        per_test = ALPHA * (1 - FISHER_SHARE) / (max(points, 1) * len(LEVEL_WIDTHS))
    thresholds = {}
    total = np.array([1.0])
    for width in range(1, max(LEVEL_WIDTHS) + 1):
        total = np.convolve(total, pmf)
        if width in LEVEL_WIDTHS:
            survival = np.cumsum(total[::-1])[::-1]  # P(sum >= value at each grid point)
            sums = width * -LEVEL_CLIP_Z + LEVEL_GRID * np.arange(total.size)
            above = np.flatnonzero(survival <= per_test)
            thresholds[width] = float(sums[above[0]] - width * centre) if above.size else np.inf
    inflation = (1 + rho) / (1 - rho)
    return LevelShiftTest(thresholds, centre, inflation)


def standing_alone(z: np.ndarray, settled: np.ndarray, test: ExcursionTest) -> np.ndarray:
    """The largest settled z-scores that stand too far above the ones below them for noise
    (module doc, step 7b): the k largest, for the largest k whose "the k-th largest is noise"
    is rejected along with every k' < k.

    Under "the k-th largest is noise", given the (m+1)-th largest x, the points from the k-th
    to the m-th are m - k + 1 independent draws beyond x, so all reach X(m) with probability
    (sf(X(m)) / sf(x)) ** (m - k + 1): exact for any tail, in the run's own units, whatever the
    MAD says about the scale. The tail is t3 (`DEFAULT_TAIL`) or, where the scans' fit is
    heavier, that fit made again with the candidates censored (they cannot make their own null
    heavy), if it is still heavier; n points count as n (1 - rho) / (1 + rho) independent ones
    (Brown's correction, as in step 5).
    Not tested with fewer than `MIN_POINTS` / 2 settled points above the trend: a running median
    longer than the run passes through most of its points (residual 0, z-scores of 1e5 against
    a MAD at its floor), and the few left are no sample of the noise.
    """
    out = np.zeros(z.size, dtype=bool)
    first = int(np.argmax(settled)) if settled.any() else z.size  # warm-up is a prefix of the steps
    candidates = largest_indices(z[first:], ALONE_MAX_POINTS + 1) + first
    candidates = candidates[z[candidates] > 0]
    if candidates.size < 2 or np.count_nonzero(z[first:] > 0) < MIN_POINTS // 2:
        return out  # too few points above the trend to be noise draws (a short run's median passes through them)
    tail = DEFAULT_TAIL
    if test.tail.nu < DEFAULT_TAIL_NU:  # heavier than t3: fit again without the candidates' values
        refitted = fit_noise_tail(z[settled], censor_at_least=ALONE_MAX_POINTS + 1)
        tail = refitted if refitted.nu < DEFAULT_TAIL_NU else DEFAULT_TAIL
    log_sf = tail.log_sf(z[candidates])
    gaps = log_sf[:-1] - log_sf[1:]  # log (sf(X(m)) / sf(X(m + 1))), m = 1, 2, ...
    level = np.log(ALONE_ALPHA / ALONE_MAX_POINTS)
    flagged = 0
    for k in range(1, gaps.size + 1):  # is the k-th largest noise? (then so is every point below it)
        noise_points = np.arange(1, gaps.size - k + 2)  # X(k) .. X(m) for m = k, k + 1, ...
        effective = independent_points(noise_points, test.rho)
        if not np.any(effective * gaps[k - 1:] <= level):
            break
        flagged = k
    out[candidates[:flagged]] = True
    return out


def _clustered_extremes(z: np.ndarray) -> np.ndarray:
    """Screen for excursions before the noise is known (module doc, step 4).

    Windows of w consecutive points (w in `SCREEN_WIDTHS`) each above the level that one point
    exceeds with probability `SCREEN_WINDOW_P` ** (1 / w) under the default t3 tail: a window
    of independent noise does so with probability `SCREEN_WINDOW_P`, a spike or a plateau
    (even with the first trend lifted under it) does so routinely.
    """
    out = np.zeros(z.size, dtype=bool)
    for width in SCREEN_WIDTHS:
        if z.size < width:
            continue
        above = (z > DEFAULT_TAIL.threshold(SCREEN_WINDOW_P ** (1.0 / width))).astype(np.int64)
        counts = np.convolve(above, np.ones(width, dtype=np.int64), mode="valid")
        out |= _spread(counts == width, width, z.size)
    return out


def _core(z: np.ndarray, start: int, stop: int) -> tuple[int, int]:
    """The stretch of an excursion that carries its evidence, so that the scans' windows do not
    stretch it over the ordinary points around it: the sub-window of largest sum of z - k, with k half the lift delta of the excursion (a one-sided CUSUM tuned to a shift
    delta uses the reference value k = delta / 2); delta is the mean of the upper half of the
    excursion's points, the lifted ones, not the noise points the scans' windows swept in.
    Unclipped: a bad batch 80x above the trend is one point, not the start of its aftermath."""
    lift = z[start:stop]
    upper = np.sort(lift)[lift.size // 2 :]
    gain = lift - 0.5 * max(float(np.mean(upper)), 0.0)
    best, best_start, best_stop = -np.inf, start, stop
    running, running_start = 0.0, 0
    for offset, value in enumerate(gain):
        if running <= 0:
            running, running_start = 0.0, offset
        running += value
        if running > best:
            best, best_start, best_stop = running, start + running_start, start + offset + 1
    return best_start, best_stop


def _excursions(y: np.ndarray, warm: np.ndarray):
    """Significant excursions, with the noise re-estimated without them until they settle.

    `y` is `robust.log_loss` of the values: exp(y) is the loss (shifted when it reaches zero),
    whose differences are those of the loss itself (step 7's size in the units of the loss).

    Returns the mask of excursion points, the trend, z-scores, surprises and the final test.
    """
    from scipy import ndimage
    settled = ~warm
    points = int(settled.sum())
    excluded = np.zeros(y.size, dtype=bool)
    start_level = float(np.median(np.exp(y[:START_POINTS])))
    for attempt in range(MAX_PASSES):
        trend = z = mask = None  # memory: the last pass's arrays go before this pass's come
        trend, z = spike_scores(y, warm, excluded)
        test = excursion_test(z[settled], (y - trend)[settled], points, excluded[settled])
        mask = excursion_mask(z, test)
        clean = settled & ~excluded
        mask |= level_shift_test(z[clean], test.rho, points).mask(z)
        gross = y - trend >= GROSS_SPIKE_LOG  # step 7: runs of gross, material points only
        where = np.flatnonzero(gross)  # few: the materiality test only where the ratio holds
        gross[where] = np.exp(y[where]) - np.exp(trend[where]) >= GROSS_MIN_SHARE * start_level
        mask |= excursion_mask(np.where(gross, z, 0.0), replace(test, per_test=GROSS_SPIKE_WINDOW_P))
        del gross, where
        mask |= standing_alone(z, settled, test)
        if attempt == 0:  # clusters of extreme points are not noise (module doc, step 4)
            screen = np.zeros(y.size, dtype=bool)
        screen |= _clustered_extremes(z) | level_shift_test(z[clean], test.rho, points, SCREEN_WINDOW_P).mask(z)
        del clean
        widened = ndimage.binary_dilation(mask | screen, iterations=1)
        if np.array_equal(widened, excluded):
            break
        excluded = widened
    # the surprises of the last pass, computed again rather than held through the scans (memory)
    return mask, trend, z, test.surprise(z), test


def _routine(residual: np.ndarray, first: int, end: int, start: int, stop: int) -> bool:
    """Whether the run reaches this excursion's height routinely around it (module doc, step
    10), in the excursion's own shape. A plateau (a core of two or more points, every one above
    the trend) is its mean lift over its w points, reached where the mean of w consecutive
    residuals comes within `MIN_SPIKE_LOG` of it; anything else (one point, or points with
    ordinary ones between them) is its peak, reached by single points within `MIN_SPIKE_LOG`.
    Routine when such stretches, counted as separate runs of positions, number more than
    `ROUTINE_SHARE` of the positions in the `NOISE_WINDOW` around it that do not overlap the
    excursion `first:end`."""
    core = residual[start:stop]
    plateau = core.size >= 2 and bool(np.all(core > 0))
    width = core.size if plateau else 1
    height = float(np.mean(core)) if plateau else float(np.max(core))
    half = NOISE_WINDOW // 2
    lo, hi = max(0, first - half), min(residual.size, end + half)
    if hi - lo < width:
        return False
    means = np.convolve(residual[lo:hi], np.full(width, 1.0 / width), mode="valid") if plateau else residual[lo:hi]
    positions = lo + np.arange(means.size)
    outside = (positions + width <= first) | (positions >= end)
    reaching = (means >= height - MIN_SPIKE_LOG) & outside
    return _reached_routinely(reaching, outside)


def _reached_routinely(reaching: np.ndarray, positions: np.ndarray) -> bool:
    """Step 10's count: the stretches (runs of consecutive positions) that reach a height, more
    than `ROUTINE_SHARE` of the positions they are counted among."""
    return len(runs_of_true(reaching)) > ROUTINE_SHARE * int(positions.sum())


def reached_by_window_maxima(finding: Event, max_steps: np.ndarray, max_values: np.ndarray,
                             points: np.ndarray) -> bool:
    """Whether the run's window maxima reach a spike of its logged points routinely (module doc,
    step 10, across series): the maxima show every step, the points only the logged ones.

    `points`: the spike's logged values (its core). Its height is the least of them, and a
    position of the maxima reaches it when as many consecutive maxima each come within
    `MIN_SPIKE_LOG` of it, outside the windows holding the spike itself (those ending at its
    steps) and among the `NOISE_WINDOW` maxima around it; non-finite maxima are another check's
    event and count neither way. Routine when such stretches number more than `ROUTINE_SHARE` of
    those positions, as in `_routine`."""
    max_steps, max_values = np.asarray(max_steps), np.asarray(max_values, dtype=np.float64)
    width = max(1, len(points))
    height = float(np.min(points)) * float(np.exp(-MIN_SPIKE_LOG))
    centre = int(np.searchsorted(max_steps, finding.step))
    half = NOISE_WINDOW // 2
    lo, hi = max(0, centre - half), min(max_steps.size, centre + half)
    steps, values = max_steps[lo:hi], max_values[lo:hi]
    end = finding.end_step if finding.end_step is not None else finding.step
    usable = np.isfinite(values) & ((steps < finding.step) | (steps > end))
    if usable.sum() < width:
        return False
    reaching = usable & (values >= height)
    if width > 1:  # w consecutive maxima, each reaching it
        reaching = np.convolve(reaching, np.ones(width, dtype=int), mode="valid") == width
        usable = np.convolve(usable, np.ones(width, dtype=int), mode="valid") == width
    return _reached_routinely(reaching, usable)


def loss_spikes(
    steps: np.ndarray, values: np.ndarray, tag: str, schedule: Schedule, what: str = "loss",
    nonfinite_steps: np.ndarray | None = None,
) -> list[Event]:
    """Spike findings for one loss-like series (finite points only are considered).

    `nonfinite_steps`: logged steps whose window held NaN/Inf steps although the point itself is
    finite (our hooks' `train/nonfinite_count`): step 9 treats them as non-finite points.
    """
    steps, values = np.asarray(steps), np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    broken = ~finite
    if nonfinite_steps is not None and len(nonfinite_steps):
        broken |= np.isin(steps, nonfinite_steps)
    beside_nonfinite = None
    if broken.any():  # copies only when there is something to leave out
        from scipy import ndimage
        beside_nonfinite = ndimage.binary_dilation(broken)[finite]  # a NaN/Inf in it, just before or after
        steps, values = steps[finite], values[finite]
    del finite, broken
    if steps.size < MIN_LOG_POINTS:
        return []
    y = log_loss(values)
    warm = steps < schedule.warmup_end_step
    if (~warm).sum() < MIN_LOG_POINTS:
        return []
    mask, trend, z, surprise, test = _excursions(y, warm)
    excursions = runs_of_true(mask)  # not scipy's label: 36 bytes a point for a 1-D mask
    if not excursions:
        return []
    findings = []
    shift = log_shift(values)
    residual = y - trend  # once: every excursion's rarity is judged on it (step 10)
    started_at = start_level(values)  # where the run started, in the loss's units (step 8's converged regime)
    for first, end in excursions:
        start, stop = _core(z, first, end)
        width = stop - start
        if width > MAX_WIDTH_POINTS or stop >= steps.size or \
                (beside_nonfinite is not None and beside_nonfinite[start:stop].any()):
            continue  # too long, still open, or part of a NaN/Inf episode (module doc, steps 8-9)
        peak = start + int(np.argmax(z[start:stop]))
        if residual[peak] < MIN_SPIKE_LOG or _routine(residual, first, end, start, stop):
            continue
        before = [index - 1 for index in (first, start) if index > 0]
        if before and y[peak] - min(y[index] for index in before) < MIN_SPIKE_LOG:
            continue  # no jump from the point before it (step 8)
        baseline = float(loss_units(trend[peak], shift))  # the local trend at the peak, in loss units
        ratio = float(np.exp(residual[peak]))
        in_warmup = bool(warm[start])
        restart = int(steps[start - 1]) if start > 0 else None
        in_converged = converged(float(values[peak]), started_at, values)
        if in_warmup:  # "during warm-up" only where the logged rate was still warming up
            rate_warming = schedule.lr_warmup_end_step is not None and steps[start] < schedule.lr_warmup_end_step
            tail = "loss_spike.tail.warmup" if rate_warming else "loss_spike.tail.early"
        elif in_converged:
            tail = "loss_spike.tail.converged"
        else:
            tail = "loss_spike.tail.restart" if restart is not None else "loss_spike.tail.first_batches"
        findings.append(
            Event(
                kind="loss_spike",
                severity="info" if in_warmup or in_converged else "warning",
                step=int(steps[start]),
                end_step=int(steps[stop - 1]),
                tag=tag,
                message="loss_spike.jump",
                args={
                    "what": Phrase(f"series.{what}"),
                    "points": Phrase("loss_spike.points.many" if width > 1 else "loss_spike.points.one"),
                    "tail": Phrase(tail),
                },
                evidence={
                    "peak_step": int(steps[peak]),
                    "peak_value": float(values[peak]),
                    "baseline": baseline,
                    "ratio_to_trend": ratio,
                    "z_score": float(z[peak]),
                    "surprise_log_p": float(surprise[start:stop].sum()),
                    "surprise_threshold": test.statistic_threshold(min(t for t in WIDTHS if t >= width)),
                    "noise_tail_nu": test.tail.nu,
                    "width_points": int(width),
                    "last_healthy_step": restart,
                    "in_warmup": in_warmup,
                    "start_loss": started_at,
                    "in_converged_regime": in_converged,
                },
            )
        )
    return findings
