"""Loss spikes: short excursions of the loss above its local trend that noise does not explain.

Method (a scan statistic on robust residuals):

1. Work on the log of the loss (`robust.log_loss`), so a spike's size is a ratio at any level.
2. Trend: a centred running median over `TREND_WINDOW` = 2 * `MAX_WIDTH_POINTS` + 1 logged
   points. A median ignores any excursion shorter than half its window, so the trend passes
   under spikes of up to `MAX_WIDTH_POINTS` points and still follows decays and the step drops
   of a learning-rate schedule (a running median keeps edges).
3. Noise: residual / local MAD (running median of |residual| over `NOISE_WINDOW` points, never
   below half the run's MAD), i.e. a robust z-score calibrated to this run and this stretch of it.
4. Tail: minibatch noise is heavy-tailed, so the z-scores are compared with a Student-t tail
   fitted to the run's own residuals (`robust.fit_noise_tail`), not with a Gaussian.
5. Threshold from a false-alarm budget (a scan with Fisher's combination): each point above
   the trend gets its tail probability p under the fitted tail, and a window of w consecutive
   points above the trend, w in `WIDTHS`, is significant when the sum of -log p over it exceeds
   the Gamma(w) quantile at level `ALPHA` / (n * len(WIDTHS)) (Fisher's method: -log p of a
   uniform p is Exp(1); `ALPHA` = 0.01 false alarms per run, Bonferroni over all windows).
   Autocorrelated residuals (lag-1 rho) count as w (1 - rho) / (1 + rho) independent points
   (Brown's correction). A decaying spike (x3, then x1.5, then x1.2) thereby adds up its
   evidence, while slow wiggles do not: their points have p around 0.1-0.4. The threshold
   grows with run length and tail weight and is never a fixed multiple of the loss.
   `ALPHA` = 0.01 with the Bonferroni split keeps the share of healthy runs with a false spike
   under 1% even where the tail fit errs, leaving room in the 2% budget for the other checks.
6. An excursion that peaks less than 10% above the trend (`MIN_SPIKE_LOG`) is not reported:
   in low-noise logs such wiggles are significant but harmless. An excursion longer than
   `MAX_WIDTH_POINTS` or still open at the end of the run is not a spike here (the divergence
   detector owns it, and reports a recovered sudden jump as a long-lived spike). Excursions that
   start during warm-up are reported as `info` only: early bumps are normal. A spike's step is
   its first individually unusual point (p < `SINGLE_POINT_FLOOR_P`).
7. Consecutive points each at least 4x above the trend (`GROSS_SPIKE_LOG`) are candidates even
   when the scan does not find them significant, provided together they are a 0.1%-tail event under
   the fitted tail (`GROSS_SPIKE_WINDOW_P`: the same Fisher combination, without the Bonferroni
   split over the run's windows; near-zero losses make large ratios ordinary, so the ratio
   alone is not enough). The fitted tail errs on the heavy side where data are scarce: on a
   short run (about a hundred logged points) the censoring in the tail fit spares only one or
   two points, so a bad batch whose loss stays high for three logged points fattens the fitted
   tail (nu near 1.5) until it explains itself away; and on a noisy per-step log the t3 floor of
   the fit makes two consecutive points 35x above the trend (a corrupted batch in the real
   MindSpore benchmark runs) a 0.2%-tail event each. A fourfold jump of the loss within a few
   points is not minibatch noise in practice.

Advice: the last logged step before the spike is the last healthy point to restart from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage, special

from tb_health_plugin.analysis.detectors.robust import (
    TINY_LOG_SCALE,
    NoiseTail,
    fit_noise_tail,
    lag1_autocorrelation,
    log_loss,
    rolling_level,
    rolling_median,
)
from tb_health_plugin.analysis.detectors.schedule import Schedule
from tb_health_plugin.analysis.findings import Finding

ALPHA = 0.01  # expected false spike alarms per healthy run
MAX_WIDTH_POINTS = 8  # the widest excursion still called a spike, in logged points
WIDTHS = (1, 2, 3, 5, 8)
TREND_WINDOW = 2 * MAX_WIDTH_POINTS + 1
NOISE_WINDOW = 8 * TREND_WINDOW
SINGLE_POINT_FLOOR_P = 0.01  # a spike starts at its first point that is a 1%-tail event alone
MIN_POINTS = 24  # fewer logged points cannot calibrate a noise tail
# Smallest jump worth a warning, whatever the noise: a loss 10% above its trend for a few points
# costs nothing, and low-noise (interval-averaged) logs resolve much smaller, harmless wiggles.
MIN_SPIKE_LOG = float(np.log(1.1))
# A jump this large above the trend is a spike whatever the fitted tail says (step 7).
GROSS_SPIKE_LOG = float(np.log(4.0))
GROSS_SPIKE_WINDOW_P = 1e-3  # ... and their window must be a 0.1%-tail event under the fit


def spike_scores(y: np.ndarray, warm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trend and robust z-scores (residual / local MAD) of a log-loss series."""
    trend = rolling_median(y, TREND_WINDOW)
    residual = y - trend
    absolute = np.abs(residual)
    settled = absolute[~warm] if (~warm).sum() >= MIN_POINTS else absolute
    global_mad = float(np.median(settled))
    local_mad = rolling_level(absolute, NOISE_WINDOW)
    scale = np.maximum(local_mad, max(0.5 * global_mad, TINY_LOG_SCALE))
    return trend, residual / scale


@dataclass(frozen=True)
class ExcursionTest:
    """Fisher's combination of the points' tail probabilities over windows of w points."""

    tail: NoiseTail
    rho: float
    per_test: float  # the false-alarm budget of one window test

    def surprise(self, z: np.ndarray) -> np.ndarray:
        """-log p of each point above the trend (0 for points at or below it)."""
        return np.where(z > 0, -self.tail.log_sf(np.maximum(z, 0.0)), 0.0)

    def statistic_threshold(self, width: int) -> float:
        """Level of the sum of surprises over `width` points that has probability `per_test`."""
        effective = max(1.0, width * (1 - self.rho) / (1 + self.rho))
        return float(special.gammainccinv(effective, self.per_test) * width / effective)


def excursion_test(z_settled: np.ndarray, residual_settled: np.ndarray, points: int) -> ExcursionTest:
    """Calibrate the scan to the run: its noise tail, autocorrelation and length (module doc)."""
    return ExcursionTest(
        tail=fit_noise_tail(z_settled),
        rho=lag1_autocorrelation(residual_settled),
        per_test=ALPHA / (max(points, 1) * len(WIDTHS)),
    )


def excursion_mask(z: np.ndarray, test: ExcursionTest) -> tuple[np.ndarray, np.ndarray]:
    """Points above the trend inside a window whose combined surprise is significant.

    Returns the mask and each point's surprise (-log p).
    """
    surprise = test.surprise(z)
    flagged = np.zeros(z.size, dtype=bool)
    cumulative = np.concatenate([[0.0], np.cumsum(surprise)])
    positives = np.concatenate([[0], np.cumsum(z > 0)])
    for width in WIDTHS:
        if z.size < width:
            continue
        window_sum = cumulative[width:] - cumulative[:-width]
        all_above = positives[width:] - positives[:-width] == width
        starts = (window_sum >= test.statistic_threshold(width)) & all_above
        if starts.any():
            flagged |= np.convolve(starts.astype(np.int8), np.ones(width, dtype=np.int8))[: z.size] > 0
    return flagged, surprise


def loss_spikes(
    steps: np.ndarray, values: np.ndarray, tag: str, schedule: Schedule, what: str = "loss"
) -> list[Finding]:
    """Spike findings for one loss-like series (finite points only are considered)."""
    finite = np.isfinite(values)
    steps, values = np.asarray(steps)[finite], np.asarray(values, dtype=np.float64)[finite]
    if steps.size < MIN_POINTS:
        return []
    y = log_loss(values)
    warm = steps < schedule.warmup_end_step
    trend, z = spike_scores(y, warm)
    settled = ~warm
    if settled.sum() < MIN_POINTS:
        return []
    test = excursion_test(z[settled], (y - trend)[settled], int(settled.sum()))
    mask, surprise = excursion_mask(z, test)
    z_gross = np.where(y - trend >= GROSS_SPIKE_LOG, z, 0.0)  # step 7: runs of gross points only
    gross, _ = excursion_mask(z_gross, replace(test, per_test=GROSS_SPIKE_WINDOW_P))
    mask |= gross
    labels, count = ndimage.label(mask)
    if count == 0:
        return []
    findings = []
    for where in ndimage.find_objects(labels):
        start, stop = where[0].start, where[0].stop
        notable = np.flatnonzero(surprise[start:stop] >= -np.log(SINGLE_POINT_FLOOR_P))
        if notable.size:  # the excursion starts at its first individually unusual point
            start = start + int(notable[0])
        width = stop - start
        if width > MAX_WIDTH_POINTS or stop >= steps.size:
            continue
        peak = start + int(np.argmax(z[start:stop]))
        if y[peak] - trend[peak] < MIN_SPIKE_LOG:
            continue
        before = values[max(0, start - TREND_WINDOW // 2) : start]
        baseline = float(np.median(before)) if before.size else float(np.exp(trend[peak]))
        ratio = float(np.exp(y[peak] - trend[peak]))
        in_warmup = bool(warm[start])
        restart = int(steps[start - 1]) if start > 0 else None
        advice = (
            f"the last healthy step is {restart}: inspect the batch(es) at steps "
            f"{int(steps[start])}-{int(steps[stop - 1])} and restart from a checkpoint at or before "
            f"step {restart} if the loss does not recover"
            if restart is not None
            else "inspect the first batches"
        )
        findings.append(
            Finding(
                kind="loss_spike",
                severity="info" if in_warmup else "warning",
                step=int(steps[start]),
                end_step=int(steps[stop - 1]),
                tag=tag,
                message=(
                    f"The {what} jumps {ratio:.2g}x above its local trend at step {int(steps[peak])}"
                    f" ({width} logged point{'s' if width > 1 else ''})"
                    + (" during warm-up, where bumps are common." if in_warmup else f"; {advice}.")
                ),
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
                },
            )
        )
    return findings
