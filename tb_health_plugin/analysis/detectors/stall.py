"""Stalled convergence: the loss stopped improving while the learning rate is still high.

Method (tests of the log-loss's change against the run's own earlier progress):

1. Domain: the settled, high-learning-rate part of the run, from the end of warm-up to the
   first point where the logged rate falls below half its peak (`schedule.HIGH_LR_SHARE`).
   The flattening of a planned anneal is outside it by construction; without a logged rate
   the domain runs to the end.
2. Healthy loss curves are close to power laws in the step, i.e. straight lines in
   (log2 step, log loss) whose slope shrinks slowly; a stall is a slope of zero. The step is
   counted from the run's first logged step (plus one logging interval, so the first point is
   not at log 0): a job resumed at step 100000 has the same curve as the same job numbered
   from 0, and the verdict must not depend on where the numbering starts. For a
   candidate tail [s, end) of the domain (s on a 5% grid of the domain; the tail keeps at least
   `MIN_TAIL_SHARE` of the domain) we fit lines through binned medians (`robust.binned_line`)
   of the tail and of everything before it. Every window is a share of the domain, never a
   number of points, so logging every step or every 10th step looks at the same stretch.
3. A tail after earlier progress is stalled when its whole change, plus or minus
   `Z_EQUIVALENCE` standard errors, stays within +-allowed, with allowed = `RATE_SHARE` * the
   earlier improvement per doubling of steps * the tail's doublings: the loss moved less than
   10% of what the earlier pace predicts (an equivalence test: calling a working run stalled
   needs the evidence). A tail needs `MIN_TAIL_POINTS` = 8 points, 4 bins of 2 for the line:
   fewer leave the slope's standard error with too few degrees of freedom to mean much. A
   rising tail is not a stall (the divergence detector owns it). The earliest stalled tail
   wins; the reported step is where the smoothed loss first reached the plateau level.
4. A run stuck from the start (tested first, on the whole domain): the change of the log-loss
   along a Theil-Sen line through every point of the domain is above -`STUCK_CHANGE_LOG` (it
   fell by less than 5% over the domain, or rose), while the domain's last tenth stands above
   `NOT_HALVED_SHARE` = 1/2 of where the run started. This is the zoo's label
   (`bench/detection/zoo_labels.py`, rule 5): the same statistic over the same stretch, the
   same 5%, the same half of the start. A loss that rose there learned nothing either (a rise
   the divergence detector reports comes first: `checks/loss.py` asks for a stall only where
   there is none, or where each is the finite edge of an overflow the run recovered from within
   its warm-up): the test once asked the change to lie within +-5%, and a run at chance
   level whose loss crept up 5-10% (a ReLU net whose layers died under Momentum at 0.38; a ReLU
   net under Adam at 0.11, +9% at a constant rate) was then neither stalled nor diverging, and
   nothing was reported. The
   start is the lower of the median of the first `START_POINTS` = 3 logged values (one freak
   batch cannot set it) and the first one: the first loss is computed before any update, the
   untrained model's, and a run whose first updates blew up (2.1, then Inf and 10-28) and
   then sat at chance level learned nothing, though its first points' median put chance at a
   fifth of its "start". A loss that never goes below zero is compared in its own units
   (`_halved`): the log of one that touches zero is shifted (`robust.log_loss`), where "half"
   means nothing. Half the start is far from where any trained model ends (a
   classifier's cross-entropy over C classes starts near ln C and a trained one ends well
   under half of it; a language model's falls from ~10 to 2-3).
   The line and its standard error (from Sen's confidence interval) estimate a quantity that
   does not depend on how densely the run was logged: a mean over k steps has k times fewer
   points with 1/sqrt(k) of the noise, so the line and its error stay the same; logging every
   k-th point leaves the line unbiased and only its error grows; and its pairwise slopes are
   differences, in which a skewed but steady noise cancels, so raw points and means estimate
   the same line. The evidence is required in the form that matters, that the run is not
   learning: |change| + `Z_EQUIVALENCE` standard errors must stay under `STUCK_RESOLVED_LOG`
   = log(1.25), i.e. the fit rules out a gain of a quarter over the domain, less than any
   learning run makes after warm-up (the zoo's healthy runs gain 30-95%), and a rise of a
   quarter: a change that imprecise says nothing either way. An estimated rise beyond the 5%
   band is judged at the band's edge: a higher estimate is no better evidence that the run did
   not learn (its error points both ways), and a large rise must not be refused for being
   large (one that the divergence detector let pass is still no progress). Asking only the
   lower bound let a noisy estimate of a rise stand for "no gain": a sigmoid net logged every
   5th step, which gained 19% over the stretch at every step, measured +12% +-13% on its points. The test's power
   therefore falls with fewer points (the error grows), not its verdict on a clearly stuck or
   clearly learning run: so the domain needs only `MIN_DOMAIN_POINTS` = 4 points, the fewest
   whose Theil-Sen line has an interval at all (3 points give 3 slopes). Asking 8, as this
   test once did, left a step-decay run whose high-rate stretch (10% to 30% of 200 steps) kept
   5 points when logged every 10th step unjudged: stalled at every step, healthy at every
   10th. A verdict can still change where the change itself lies within its error of the 5%
   band; no rule avoids that.
5. Too short a domain to tell: a loss that fell during warm-up (significantly more than 5%,
   by the same Theil-Sen line over the warm-up's points, in log2 steps) is judged by step 4
   only when the warm-up's pace, kept over the domain's doublings, predicts at least
   `PACE_BAND_MULTIPLE` = 2 times the 5% band (the alternative one band-width beyond its
   edge). The first half-cycle of cosine warm restarts (the rate falls under half its peak
   within a few percent of the run) spans a fraction of a doubling, in which a healthy
   power-law curve that fell fast in warm-up moves only a few percent; such a domain is left
   to step 3. (This guard used a binned line that needs 8 warm-up points, so a sparse log
   skipped it and judged what the dense log declined to.)
6. Converged is not stalled: a loss bounded below by zero whose tail stands at
   `CONVERGED_SHARE` = 1% of its start or below has fit its data. Real tasks' loss floors (label
   noise, the entropy of text) lie far above 1% of the untrained loss (language models end at
   15-30% of ln V, ImageNet classifiers near 15% of ln 1000); a loss 100x under its start is
   in the regime where it shrinks without a floor, and a flat tail there (a classifier at
   2e-5 under Adam, its batches' losses jumping by decades) costs nothing to stop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tb_health_plugin.analysis.detectors.robust import (
    TINY_LOG_SCALE,
    LinearFit,
    binned_line,
    log_loss,
    robust_sigma,
    rolling_median,
    t_quantile,
    theil_sen,
)
from tb_health_plugin.analysis.detectors.schedule import Schedule
from tb_health_plugin.analysis.event import Event, Phrase

MIN_POINTS = 10  # the stuck-from-start test on 8-9 settled points (its evidence rule judges them)
MIN_TAIL_POINTS = 8
MIN_DOMAIN_POINTS = 4  # step 4: the fewest points whose Theil-Sen line has an interval
MIN_TAIL_SHARE = 0.25
START_GRID = np.arange(0.0, 0.76, 0.05)
RATE_SHARE = 0.10
Z_EQUIVALENCE = 2.0
TREND_WINDOW = 17
MAX_FIT_POINTS = 1000
MAX_THEIL_SEN_POINTS = 400  # Theil-Sen is quadratic in the points
THEIL_SEN_ALPHA = 0.6827  # a one-sigma interval: its half-width is the standard error
# "Stuck from the start": less than 5% of improvement over the whole run (or less than its
# point-to-point noise). A run that is learning at all gains more than that; for comparison,
# LLM pretraining still drops the loss by 15-20% after its warm-up.
STUCK_CHANGE_LOG = float(np.log(1.05))
STUCK_RESOLVED_LOG = float(np.log(1.25))
NOT_HALVED_SHARE = 0.5  # step 4: a settled level above half the start is far from trained
CONVERGED_SHARE = 0.01  # step 6: a tail at 1% of the start has fit its data
START_POINTS = 3  # the start level: median of the first 3 logged values (one freak batch cannot set it)
PACE_BAND_MULTIPLE = 2.0  # step 5: the earlier pace must predict twice the 5% band over the domain


def stalled_convergence(
    steps: np.ndarray, values: np.ndarray, tag: str, schedule: Schedule, what: str = "loss"
) -> list[Event]:
    """At most one stall finding for one loss series."""
    finite = np.isfinite(values)
    steps, values = np.asarray(steps)[finite], np.asarray(values, dtype=np.float64)[finite]
    if schedule.lr_at_steps is not None and schedule.lr_at_steps.size == finite.size:
        # index the rate like the points kept: a NaN in the middle must not shift the domain
        schedule = replace(schedule, lr_at_steps=schedule.lr_at_steps[finite])
    n = steps.size
    if n < MIN_POINTS:
        return []
    y = log_loss(values)
    interval = float(np.median(np.diff(steps))) if n > 1 else 1.0
    x = np.log2(steps - steps[0] + max(interval, 1.0))  # relative: see step 2 of the module doc
    trend = rolling_median(y, TREND_WINDOW, edges="trend")
    sigma = max(robust_sigma(y - trend), TINY_LOG_SCALE)
    d0 = min(int(np.searchsorted(steps, schedule.warmup_end_step)), n - 1)
    d1 = _high_lr_end(schedule, d0, n)
    if d1 - d0 < MIN_DOMAIN_POINTS:
        return []
    whole = _stuck_from_start(steps, x, y, d0, d1, values)
    if whole is not None:
        return [_finding(steps, values, tag, what, schedule, d0, d0, d1, whole, STUCK_CHANGE_LOG, 0.0, sigma)]
    if d1 - d0 < MIN_TAIL_POINTS:
        return []
    group = max(1, n // MAX_FIT_POINTS)  # medians of `group` points: the fits see at most ~1000
    kept = (n // group) * group
    gx = np.median(x[:kept].reshape(-1, group), axis=1)
    gy = np.median(y[:kept].reshape(-1, group), axis=1)
    for share in START_GRID[1:]:
        s = d0 + int(share * (d1 - d0))
        if d1 - s < max(MIN_TAIL_POINTS, MIN_TAIL_SHARE * (d1 - d0)):
            break
        tail = binned_line(gx[s // group : d1 // group], gy[s // group : d1 // group])
        if tail is None:
            continue
        before = binned_line(gx[: s // group], gy[: s // group]) if s >= 8 else None
        earlier_rate = max(-before.slope, 0.0) if before is not None else 0.0
        allowed = RATE_SHARE * earlier_rate * tail.span
        if not _flat_within(tail, allowed, against_earlier_pace=True):
            continue
        if converged(float(np.median(values[s:d1])), start_level(values), values):
            return []
        plateau = float(np.median(y[s + (d1 - s) // 2 : d1]))
        reached = np.flatnonzero(trend[d0:d1] <= plateau + sigma)
        start = d0 + int(reached[0]) if reached.size else s
        start = min(start, s)
        return [_finding(steps, values, tag, what, schedule, start, s, d1, tail, allowed, earlier_rate, sigma)]
    return []


def _stuck_from_start(steps: np.ndarray, x: np.ndarray, y: np.ndarray, d0: int, d1: int,
                      values: np.ndarray) -> LinearFit | None:
    """Steps 4-5 of the module doc: the Theil-Sen line over the whole domain when it shows a
    run stuck far from converged, else None."""
    if _halved(y, d0, d1, values):
        return None  # tested first: cheap, and most runs end here (no Theil-Sen line)
    whole = _whole_change(steps[d0:d1].astype(np.float64), y[d0:d1])
    if whole is None or not _flat_within(whole, STUCK_CHANGE_LOG, against_earlier_pace=False):
        return None
    warmup = _whole_change(x[: d0 + 1], y[: d0 + 1], min_points=START_POINTS)
    if warmup is not None and -warmup.change - Z_EQUIVALENCE * warmup.change_stderr > STUCK_CHANGE_LOG:
        predicted = -warmup.slope * float(x[d1 - 1] - x[d0])
        if predicted < PACE_BAND_MULTIPLE * STUCK_CHANGE_LOG:
            return None  # too short a domain to tell the warm-up's pace from a stall
    return whole


def _halved(y: np.ndarray, d0: int, d1: int, values: np.ndarray) -> bool:
    """Whether the domain's last tenth stands at `NOT_HALVED_SHARE` of the start or below.

    "Half the start" is a ratio of losses, so a loss that never goes below zero is judged in its
    own units: the same statistic (medians, the same start) the zoo's rule 5 uses. For a positive
    loss that is the test on its log; for one that reaches exactly zero (a float16 or float32
    classifier whose every batch is fit) the log is shifted (`robust.log_loss`), in which half
    means nothing: a run from 2.07 down to 0.0 stood, shifted by the values' spread of 2.2, at
    0.52 of its start and was called stuck from the start, its plateau "0.0" (zoo_seen_069). Only
    a loss that goes below zero, where no ratio has a meaning, is judged on its shifted log.
    """
    tail = slice(d1 - max(1, (d1 - d0) // 10), d1)
    if float(values.min()) >= 0.0:
        return float(np.median(values[tail])) <= NOT_HALVED_SHARE * start_level(values)
    return float(np.median(y[tail])) <= start_level(y) + np.log(NOT_HALVED_SHARE)


def start_level(series: np.ndarray, points: int = START_POINTS) -> float:
    """Where the run started (step 4 of the module doc): the lower of the median of the first
    `points` values and the first one, the untrained model's. The gradient-norm detector
    judges a loss's convergence from the same start, the divergence detector's twice-above
    warning from its first five points."""
    return min(float(np.median(series[:points])), float(series[0]))


def converged(level: float, start: float, values: np.ndarray) -> bool:
    """Step 6 of the module doc: a loss bounded below by zero (none of its finite `values` under
    zero) that stands at `level`, `CONVERGED_SHARE` of its `start` or below, has fit its data.
    The divergence detector draws the same line for a rise."""
    if start <= 0 or np.any(values[np.isfinite(values)] < 0):
        return False  # a loss that goes below zero has no "share of the start"
    return level <= CONVERGED_SHARE * start


def _whole_change(x: np.ndarray, y: np.ndarray, min_points: int = MIN_DOMAIN_POINTS) -> LinearFit | None:
    """Theil-Sen line of the log-loss over the whole domain, its standard error from Sen's
    confidence interval of the slope (at most `MAX_THEIL_SEN_POINTS`, evenly spread)."""
    if x.size < min_points or x[-1] <= x[0]:
        return None
    index = np.arange(x.size)
    if index.size > MAX_THEIL_SEN_POINTS:
        index = index[np.linspace(0, index.size - 1, MAX_THEIL_SEN_POINTS).astype(int)]
    slope, _, low, high = theil_sen(y[index], x[index], alpha=THEIL_SEN_ALPHA)
    stderr = (high - low) / (2 * t_quantile(np.inf, 0.5 + THEIL_SEN_ALPHA / 2))
    return LinearFit(float(slope), float(stderr), float(x[-1] - x[0]))


def _flat_within(tail: LinearFit, allowed: float, against_earlier_pace: bool) -> bool:
    """Step 3 (equivalence against the earlier pace) or 4 (no gain of `allowed`, a rise included,
    on a change measured precisely enough) of the module doc."""
    if against_earlier_pace:
        return abs(tail.change) + Z_EQUIVALENCE * tail.change_stderr <= allowed
    judged_at = min(abs(tail.change), allowed)  # a rise beyond the band is judged at its edge
    return tail.change >= -allowed and judged_at + Z_EQUIVALENCE * tail.change_stderr <= STUCK_RESOLVED_LOG


def _high_lr_end(schedule: Schedule, d0: int, n: int) -> int:
    mask = schedule.high_lr_mask()
    if mask is None:
        return n
    low = np.flatnonzero(~mask[d0:])
    return d0 + int(low[0]) if low.size else n


def _message(from_start: bool, tail: LinearFit, allowed: float) -> str:
    """A loss that rose while learning nothing points at a rate too high, not too small (the
    advice of a flat one): the zoo's runs of it are ReLU nets under Momentum at 0.38 (its layers
    died) and Adam at 0.11."""
    if not from_start:
        return "stalled.since_step"
    return "stalled.from_start.rising" if tail.change > allowed else "stalled.from_start"


def _finding(steps, values, tag, what, schedule, start, s, d1, tail, allowed, earlier_rate, sigma) -> Event:
    from_start = start <= int(np.searchsorted(steps, schedule.warmup_end_step))
    lr_share = None
    if schedule.lr_at_steps is not None and schedule.lr_peak:
        lr_share = float(np.median(schedule.lr_at_steps[s:d1]) / schedule.lr_peak)
    lr_text = Phrase("stalled.lr_share" if lr_share is not None else "")
    message = _message(from_start, tail, allowed)
    args = {"what": Phrase(f"series.{what}"), "lr": lr_text}
    if message == "stalled.from_start.rising":
        args["rise"] = float(np.expm1(tail.change))
    return Event(
        kind="stalled_convergence",
        severity="warning",
        step=int(steps[start]),
        end_step=int(steps[d1 - 1]),
        tag=tag,
        message=message,
        args=args,
        evidence={
            "change_log": tail.change,
            "change_stderr_log": tail.change_stderr,
            "allowed_change_log": allowed,
            "earlier_improvement_per_doubling_log": earlier_rate,
            "noise_sigma_log": sigma,
            "plateau_loss": float(np.median(values[s:d1])),
            "tail_points": int(d1 - s),
            "lr_share_of_peak": lr_share,
            "stuck_from_start": from_start,
        },
    )
