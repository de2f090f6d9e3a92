"""Robust statistics shared by the loss detectors.

Minibatch losses are noisy, heavy-tailed and logged at any interval, so every detector works on
the same footing: the log of the loss, a running-median trend, a median-absolute-deviation noise
scale and a Student-t tail fitted to the run's own residuals. All functions are vectorised
(scipy.ndimage filters), linear in the number of points.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import ndimage, stats

MAD_TO_SIGMA = 1.4826  # sigma = 1.4826 * MAD for Gaussian noise
TINY_LOG_SCALE = 1e-6  # floor of a noise scale in log units: a loss logged with 6 digits


def log_loss(values: np.ndarray) -> np.ndarray:
    """The log of the loss, defined for any finite loss.

    Positive losses: `log(v)`, so multiplicative noise and "the loss doubled" have one size at
    every level. Losses that reach zero or below (contrastive, ELBO-style objectives) are shifted
    before the log: `log(v - min(v) + spread)`, where `spread` is the interquartile range of the
    values (or 1 when they are all equal). The shift keeps the order of the points and the
    relative size of jumps near the lowest value the run reached.
    """
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0 or finite.min() > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(values)
    q25, q75 = np.percentile(finite, [25, 75])
    spread = (q75 - q25) or float(np.abs(finite).max()) or 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(values - finite.min() + spread)


def odd_window(points: int, minimum: int = 3) -> int:
    points = max(int(points), minimum)
    return points if points % 2 else points + 1


def rolling_median(y: np.ndarray, window: int) -> np.ndarray:
    """Centred running median that keeps a straight trend straight up to the ends.

    Plain edge padding (repeating or mirroring the end values) biases the median near the ends
    of a sloped curve: repeating the last value of a falling loss drags the trend below the
    last points, which then look like a spike. We pad by point reflection through the median of
    the last (first) few points, which continues a linear trend past the end.
    """
    n = y.size
    if n == 0:
        return y.copy()
    window = min(odd_window(window), odd_window(n, 1))
    half = window // 2
    if half == 0:
        return y.copy()
    anchor_points = max(1, min(5, n))
    head_anchor = np.median(y[:anchor_points])
    tail_anchor = np.median(y[-anchor_points:])
    pad = min(half, n - 1)
    head = 2 * head_anchor - y[1 : pad + 1][::-1]
    tail = 2 * tail_anchor - y[n - pad - 1 : n - 1][::-1]
    padded = np.concatenate([head, y, tail])
    filtered = ndimage.median_filter(padded, size=window, mode="nearest")
    return filtered[pad : pad + n]


def mad(x: np.ndarray) -> float:
    """Median absolute deviation from the median (raw, not scaled to sigma)."""
    if x.size == 0:
        return 0.0
    return float(np.median(np.abs(x - np.median(x))))


def robust_sigma(x: np.ndarray) -> float:
    """Gaussian-equivalent standard deviation from the MAD."""
    return MAD_TO_SIGMA * mad(x)


def lag1_autocorrelation(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, clipped to [0, 0.95] (0 for too few points).

    The residuals are first winsorised at 3 robust sigmas, so that the few faults being looked
    for (a 3-point spike is a strongly autocorrelated block) do not dominate the estimate.
    """
    if x.size < 8:
        return 0.0
    x = x - np.median(x)
    limit = 3.0 * robust_sigma(x)
    x = np.clip(x, -limit, limit)
    denominator = float(np.dot(x, x))
    if denominator <= 0:
        return 0.0
    return float(np.clip(np.dot(x[:-1], x[1:]) / denominator, 0.0, 0.95))


# Student-t degrees of freedom tried when fitting a run's noise tail, heaviest first.
T_DEGREES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0, 20.0, 50.0, np.inf)


@cache
def _t_quantile_ratio(nu: float) -> float:
    """q(0.90)/q(0.50) of |T| for Student-t with `nu` degrees of freedom."""
    dist = stats.norm if np.isinf(nu) else stats.t(nu)
    return float(dist.ppf(0.95) / dist.ppf(0.75))


@dataclass(frozen=True)
class NoiseTail:
    """A Student-t model of a run's residual tail, in units of the residuals' MAD.

    The MAD is the median of |T| (the 0.75 quantile of T), so `threshold(p)` is the level a single residual
    exceeds with probability `p` under the fitted tail.
    """

    nu: float

    def threshold(self, p: float) -> float:
        dist = stats.norm if np.isinf(self.nu) else stats.t(self.nu)
        return float(dist.isf(p) / dist.ppf(0.75))


def fit_noise_tail(z: np.ndarray) -> NoiseTail:
    """Fit the heaviness of a run's noise from the quantile ratio q90/q50 of |z|.

    Method: for Student-t noise the ratio of the 0.90 and 0.50 quantiles of |T| falls from
    6.3 (Cauchy) to 2.44 (Gaussian) as the degrees of freedom grow; we pick the heaviest
    tabulated `nu` whose ratio is at least the observed one (the conservative side). These
    quantiles do not move as long as fewer than 10% of the points are faults, so a few spikes
    cannot inflate the fitted tail; with fewer than 20 points we assume nu = 3.
    """
    z = np.abs(z[np.isfinite(z)])
    if z.size < 20:
        return NoiseTail(3.0)
    q50, q90 = np.quantile(z, [0.5, 0.9])
    if q50 <= 0:
        return NoiseTail(3.0)
    ratio = q90 / q50
    chosen = T_DEGREES[0]
    for nu in T_DEGREES:
        if _t_quantile_ratio(nu) >= ratio:
            chosen = nu
    return NoiseTail(chosen)


@dataclass(frozen=True)
class LinearFit:
    """Least-squares line through binned medians: slope, its standard error, and the x span."""

    slope: float
    stderr: float
    span: float

    @property
    def change(self) -> float:
        return self.slope * self.span

    @property
    def change_stderr(self) -> float:
        return self.stderr * self.span


def binned_line(x: np.ndarray, y: np.ndarray, bins: int = 16) -> LinearFit | None:
    """Fit a line to the medians of `bins` equal-count bins of (x, y).

    Binning by medians makes the fit robust to spikes and linear in the number of points; the
    standard error comes from the scatter of the bin medians around the line (scipy linregress).
    """
    n = x.size
    if n < 6:
        return None
    bins = int(min(bins, n // 2))
    edges = np.linspace(0, n, bins + 1).astype(int)
    bx = np.array([np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    by = np.array([np.median(y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    if np.ptp(bx) <= 0:
        return None
    fit = stats.linregress(bx, by)
    stderr = float(fit.stderr) if np.isfinite(fit.stderr) else 0.0
    return LinearFit(float(fit.slope), stderr, float(x[-1] - x[0]))
