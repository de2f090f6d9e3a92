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
5. Threshold from a false-alarm budget: a run of n points is scanned for excursions of w
   consecutive points, w in `WIDTHS`. Under the fitted tail, w independent points all exceed
   level x with probability P(T > x)^w; with `ALPHA` = 0.002 false alarms per run shared by
   n * len(WIDTHS) tests (Bonferroni), the level for width w is the x with
   P(T > x) = (ALPHA / (n * len(WIDTHS)))^(1 / w_eff), where w_eff shrinks w by the residuals'
   lag-1 autocorrelation rho as w (1 - rho) / (1 + rho). Each point of a wide excursion must
   also pass the 1% single-point level, so slow wiggles never add up to a spike. The threshold
   therefore grows with run length (log n for Gaussian noise) and with tail weight, and is
   never a fixed multiple of the loss.
6. An excursion longer than `MAX_WIDTH_POINTS` or still open at the end of the run is not a
   spike (the divergence detector owns it). Excursions that start during warm-up are reported
   as `info` only: early bumps are normal.

Advice: the last logged step before the spike is the last healthy point to restart from.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy import ndimage

from tb_health_plugin.analysis.detectors.robust import (
    TINY_LOG_SCALE,
    fit_noise_tail,
    lag1_autocorrelation,
    log_loss,
    rolling_median,
)
from tb_health_plugin.analysis.detectors.schedule import Schedule
from tb_health_plugin.analysis.findings import Finding

ALPHA = 0.002  # expected false spike alarms per healthy run
MAX_WIDTH_POINTS = 8  # the widest excursion still called a spike, in logged points
WIDTHS = (1, 2, 3, 5, 8)
TREND_WINDOW = 2 * MAX_WIDTH_POINTS + 1
NOISE_WINDOW = 8 * TREND_WINDOW
SINGLE_POINT_FLOOR_P = 0.01  # every point of an excursion must be a 1%-tail event on its own
MIN_POINTS = 24  # fewer logged points cannot calibrate a noise tail


def spike_scores(y: np.ndarray, warm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trend and robust z-scores (residual / local MAD) of a log-loss series."""
    trend = rolling_median(y, TREND_WINDOW)
    residual = y - trend
    absolute = np.abs(residual)
    settled = absolute[~warm] if (~warm).sum() >= MIN_POINTS else absolute
    global_mad = float(np.median(settled))
    local_mad = rolling_median(absolute, NOISE_WINDOW)
    scale = np.maximum(local_mad, max(0.5 * global_mad, TINY_LOG_SCALE))
    return trend, residual / scale


def width_thresholds(z_settled: np.ndarray, residual_settled: np.ndarray, points: int) -> dict[int, float]:
    """The z level each point of a w-wide excursion must exceed, per width (see module doc)."""
    tail = fit_noise_tail(z_settled)
    rho = lag1_autocorrelation(residual_settled)
    per_test = ALPHA / (max(points, 1) * len(WIDTHS))
    floor = tail.threshold(SINGLE_POINT_FLOOR_P)
    thresholds = {}
    for width in WIDTHS:
        effective = max(1.0, width * (1 - rho) / (1 + rho))
        thresholds[width] = max(tail.threshold(per_test ** (1.0 / effective)), floor)
    return thresholds


def excursion_mask(z: np.ndarray, thresholds: dict[int, float]) -> np.ndarray:
    """Points belonging to some window of w consecutive points that all exceed the w level."""
    flagged = np.zeros(z.size, dtype=bool)
    for width, level in thresholds.items():
        if z.size < width:
            continue
        starts = sliding_window_view(z, width).min(axis=1) >= level
        if starts.any():
            flagged |= np.convolve(starts.astype(np.int8), np.ones(width, dtype=np.int8))[: z.size] > 0
    return flagged


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
    thresholds = width_thresholds(z[settled], (y - trend)[settled], int(settled.sum()))
    labels, count = ndimage.label(excursion_mask(z, thresholds))
    if count == 0:
        return []
    findings = []
    for where in ndimage.find_objects(labels):
        start, stop = where[0].start, where[0].stop
        width = stop - start
        if width > MAX_WIDTH_POINTS or stop >= steps.size:
            continue
        peak = start + int(np.argmax(z[start:stop]))
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
                    "z_threshold": float(thresholds[min(t for t in WIDTHS if t >= width)]),
                    "width_points": int(width),
                    "last_healthy_step": restart,
                    "in_warmup": in_warmup,
                },
            )
        )
    return findings
