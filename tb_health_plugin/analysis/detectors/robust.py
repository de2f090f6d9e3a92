"""Robust statistics shared by the loss detectors.

Minibatch losses are noisy, heavy-tailed and logged at any interval, so every detector works on
the same footing: the log of the loss, a running-median trend, a median-absolute-deviation noise
scale and a Student-t tail fitted to the run's own residuals. All functions are vectorised
(scipy.ndimage filters), linear in the number of points. scipy is imported inside the functions
that use it, here and in the other detectors: it costs a second at start-up that `--help`, the
tab's first listing and a logdir without losses need not pay.

Memory: a series of n points costs 8n bytes per float64 array, so on a series of millions of
points the temporaries of an expression, not the results, set the analysis' peak. Rolling
medians and elementwise maps therefore work block by block (`BLOCK_POINTS`) into one output
array, and nothing here copies its input when it need not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal, NamedTuple

import numpy as np

MAD_TO_SIGMA = 1.4826  # sigma = 1.4826 * MAD for Gaussian noise
TINY_LOG_SCALE = 1e-6  # floor of a noise scale in log units: a loss logged with 6 digits
# Points a rolling filter or an elementwise map handles at once: its temporaries cost a few
# times 512 KiB whatever the series' length, and the per-block overhead (a few microseconds
# for a scipy call) stays negligible next to the work on 65,536 points.
BLOCK_POINTS = 1 << 16


def log_loss(values: np.ndarray) -> np.ndarray:
    """The log of the loss, defined for any finite loss.

    Positive losses: `log(v)`, so multiplicative noise and "the loss doubled" have one size at
    every level. Losses that reach zero or below (contrastive, ELBO-style objectives) are shifted
    before the log: `log(v - min(v) + spread)`, where `spread` is the interquartile range of the
    values (or 1 when they are all equal). The shift keeps the order of the points and the
    relative size of jumps near the lowest value the run reached.
    """
    values = np.asarray(values, dtype=np.float64)
    shift = log_shift(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(values) if shift is None else np.log(values - shift[0] + shift[1])


def loss_units(levels: np.ndarray | float, shift: tuple[float, float] | None) -> np.ndarray | float:
    """Levels of `log_loss` (a trend, a threshold) back in the units of the loss (`shift`:
    `log_shift` of the same values)."""
    return np.exp(levels) if shift is None else np.exp(levels) + shift[0] - shift[1]


def log_shift(values: np.ndarray) -> tuple[float, float] | None:
    """`log_loss`'s shift: None for positive losses, else (the minimum, the spread)."""
    values = np.asarray(values, dtype=np.float64)
    is_finite = np.isfinite(values)
    if float(np.min(values, where=is_finite, initial=np.inf)) > 0:  # all positive, or none finite
        return None
    finite = values[is_finite]
    q25, q75 = np.percentile(finite, [25, 75])
    return float(finite.min()), float((q75 - q25) or float(np.abs(finite).max()) or 1.0)


def odd_window(points: int, minimum: int = 3) -> int:
    points = max(int(points), minimum)
    return points if points % 2 else points + 1


EdgeRule = Literal["mirror", "mirror_within", "trend"]


def rolling_median(values: np.ndarray, width: int, *, edges: EdgeRule) -> np.ndarray:
    """Centred rolling median; NaN inputs are first replaced by their nearest finite neighbour.

    Infinite inputs are kept, so a stretch of +inf (an overflowed norm) raises the median while a
    single one does not move it. Near the ends the window runs past the series; `edges` names how
    it is completed, a choice each caller makes for its signal:

    - "mirror": the series is reflected about its end points (scipy's `mirror` mode), `width`
      at most twice the series' length less one. For levels that hover around a value (log gradient norms, update
      ratios, step times): an end point is judged among its real neighbours.
    - "mirror_within": reflected as "mirror", with the window of "trend" (odd, at least 3, at
      most the series' length): a series shorter than the window is judged on a window of its
      own length, so each end's level comes from its own half. For a local noise scale (the
      running median of |residual| in the spike detector), whose window is far longer than a
      short run.
    - "trend": point reflection through the median of the last (first) few points, which
      continues a linear trend past the end, with `width` made odd (at least 3) and at most the
      series' length. For a sloped curve such as a falling loss, where repeating or mirroring
      the end values would drag the trend below the last points, which would then look like a
      spike.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    filled = _fill_nan(values)
    if np.all(np.isnan(filled)):
        return filled.copy()
    if edges == "mirror":
        # at most one reflection: past that, scipy's mirror mode reads memory outside the array
        return median_filter(filled, min(width, 2 * filled.size - 1), "mirror")
    if edges == "mirror_within":
        return median_filter(filled, min(odd_window(width), odd_window(filled.size, 1)), "mirror")
    if edges == "trend":
        return _trend_continued_median(filled, width)
    raise ValueError(f"edges must be 'mirror', 'mirror_within' or 'trend', got {edges!r}")


def median_filter(
    x: np.ndarray, size: int, mode: str, head: np.ndarray | None = None, tail: np.ndarray | None = None
) -> np.ndarray:
    """scipy's `median_filter(concatenate([head, x, tail]), size, mode=mode)` at the points of x.

    Computed block by block (`BLOCK_POINTS` outputs at a time, each from its block and `size`
    points either side), so neither the padded series nor scipy's whole-series temporaries
    exist: the cost is the output and a block's worth. A median is an order statistic of its
    window, so the values are exactly those of one call on the whole series: a block's windows
    away from the series' ends lie inside it, and near an end the block holds that end and
    enough points for `mode` to complete the window as the whole-series call does.
    """
    from scipy import ndimage
    head = np.empty(0) if head is None else head
    tail = np.empty(0) if tail is None else tail
    total = head.size + x.size + tail.size
    if x.ndim != 1 or total <= 2 * BLOCK_POINTS:
        padded = np.concatenate([head, x, tail]) if head.size or tail.size else x
        return ndimage.median_filter(padded, size=size, mode=mode)[head.size : head.size + x.size]
    out = np.empty(x.size)
    for start in range(0, x.size, BLOCK_POINTS):
        stop = min(start + BLOCK_POINTS, x.size)
        low, high = max(0, head.size + start - size), min(total, head.size + stop + size)
        block = _padded_slice(head, x, tail, low, high)
        offset = head.size + start - low
        out[start:stop] = ndimage.median_filter(block, size=size, mode=mode)[offset : offset + stop - start]
    return out


def map_blocks(function: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """`function(x)` for an elementwise function whose values are of `dtype`, computed
    `BLOCK_POINTS` at a time into one output: its expression's temporaries cost a block, not the
    series."""
    if x.ndim != 1 or x.size <= BLOCK_POINTS:
        return function(x)
    out = np.empty(x.size, dtype=dtype)
    for start in range(0, x.size, BLOCK_POINTS):
        out[start : start + BLOCK_POINTS] = function(x[start : start + BLOCK_POINTS])
    return out


def largest_indices(x: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest values of `x`, largest first, found `BLOCK_POINTS` at a
    time: a block's partition is the only temporary, not an argsort of the series."""
    kept = np.empty(0, dtype=np.int64)
    for start in range(0, x.size, BLOCK_POINTS):
        block = x[start : start + BLOCK_POINTS]
        top = np.argpartition(block, -count)[-count:] if block.size > count else np.arange(block.size)
        kept = np.concatenate([kept, top + start])
        if kept.size > count:
            kept = kept[np.argpartition(x[kept], -count)[-count:]]
    return kept[np.argsort(-x[kept], kind="stable")]


def cumulative_sum(x: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """`concatenate([[0], cumsum(x)])` in one array, without the intermediate copy; the same
    values (a running sum adds one value after the other either way)."""
    out = np.empty(x.size + 1, dtype=dtype)
    out[0] = 0
    np.cumsum(x, dtype=dtype, out=out[1:])
    return out


def _padded_slice(head: np.ndarray, x: np.ndarray, tail: np.ndarray, low: int, high: int) -> np.ndarray:
    """`concatenate([head, x, tail])[low:high]` without building the whole concatenation."""
    pieces, offset = [], 0
    for part in (head, x, tail):
        a, b = max(low - offset, 0), min(high - offset, part.size)
        if a < b:
            pieces.append(part[a:b])
        offset += part.size
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _trend_continued_median(y: np.ndarray, window: int) -> np.ndarray:
    n = y.size
    window = min(odd_window(window), odd_window(n, 1))
    half = window // 2
    if half == 0:
        return y.copy()
    c = 2 if n >= 2 * 2 + half + 1 else 0  # anchor: median of the 2c + 1 end points, at index c
    pad = min(half, n - 1 - 2 * c)
    head_anchor = np.median(y[: 2 * c + 1])
    tail_anchor = np.median(y[n - 2 * c - 1 :])
    k = np.arange(pad, 0, -1)  # padded positions -pad..-1 at the head
    head = 2 * head_anchor - y[2 * c + k]
    tail = 2 * tail_anchor - y[n - 1 - 2 * c - k[::-1]]
    return median_filter(y, window, "nearest", head, tail)


def _fill_nan(values: np.ndarray) -> np.ndarray:
    """The values with each NaN replaced by its nearest finite neighbour (the values themselves,
    not a copy, when there is nothing to replace)."""
    nan = np.isnan(values)
    if not nan.any() or nan.all():
        return values
    index = np.arange(values.size)
    good = index[~nan]
    nearest = good[np.clip(np.searchsorted(good, index), 0, good.size - 1)]
    before = good[np.clip(np.searchsorted(good, index) - 1, 0, good.size - 1)]
    pick = np.where(np.abs(before - index) <= np.abs(nearest - index), before, nearest)
    return values[pick]


def mad(x: np.ndarray) -> float:
    """Median absolute deviation from the median (raw, not scaled to sigma)."""
    if x.size == 0:
        return 0.0
    deviation = x - np.median(x)
    np.abs(deviation, out=deviation)
    return float(np.median(deviation, overwrite_input=True))


def robust_sigma(x: np.ndarray) -> float:
    """Gaussian-equivalent standard deviation from the MAD."""
    return MAD_TO_SIGMA * mad(x)


MEDIAN_SD = 1.2533  # standard deviation of a median of m Gaussian values: 1.2533 sigma / sqrt(m)


def independent_points(points, rho: float):
    """What `points` lag-1 autocorrelated values (coefficient `rho`) are worth as independent ones
    in a mean or a sum, at least one: points (1 - rho) / (1 + rho), the variance ratio of an AR(1)
    mean (Brown's correction, for Fisher's method)."""
    return np.maximum(1.0, points * (1 - rho) / (1 + rho))


def robust_lag1_autocorrelation(residual: np.ndarray) -> float:
    """Lag-1 autocorrelation from the MADs of the residuals and of their first differences.

    For stationary noise var(r[t+1] - r[t]) = 2 var(r) (1 - rho), so rho = 1 - (MAD(diff) /
    MAD(r))^2 / 2. Medians make this blind to the few plateaus being looked for, which inflate a
    product-moment estimate (a +2 sigma plateau over 5% of the points reads as rho of 0.2).
    Clipped to [0, 0.95].
    """
    if residual.size < 8:
        return 0.0
    spread = mad(residual)
    if spread <= 0:
        return 0.0
    ratio = mad(np.diff(residual)) / spread
    return float(np.clip(1.0 - ratio**2 / 2.0, 0.0, 0.95))


# Student-t degrees of freedom tried when fitting a run's noise tail, heaviest first, with the
# MAD of residuals around a 17-point running median of i.i.d. t(nu) noise relative to the MAD
# of the noise itself (the median absorbs a little of the noise), measured once by simulation
# (4e5 draws each).
T_DEGREES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0, 20.0, 50.0, np.inf)
RESIDUAL_MAD_SHRINK = (0.979, 0.966, 0.957, 0.953, 0.952, 0.948, 0.944, 0.936, 0.938, 0.933, 0.934, 0.933)


@dataclass(frozen=True)
class NoiseTail:
    """A Student-t model of a run's residual tail, in units of the residuals' MAD.

    `threshold(p)` is the level one residual / MAD exceeds with probability `p`: the t quantile
    divided by the t MAD (its 0.75 quantile) and by the shrink of the MAD of median residuals.
    """

    nu: float
    mad_shrink: float = 1.0

    def threshold(self, p: float) -> float:
        return float(t_quantile(self.nu, p, upper=True) / (t_quantile(self.nu, 0.75) * self.mad_shrink))

    def log_sf(self, z: np.ndarray) -> np.ndarray:
        """log P(residual / MAD > z) under the fitted tail, accurate far into the tail."""
        from scipy import special
        index = T_DEGREES.index(self.nu)
        u = np.asarray(z, dtype=np.float64) * _t_mads()[index] * self.mad_shrink
        if np.isinf(self.nu):
            return special.log_ndtr(-u)
        return np.log(np.maximum(special.stdtr(self.nu, -u), 1e-300))


def t_quantile(nu: float, q: float, upper: bool = False) -> float:
    """The `q` quantile of the standard Student t(nu) (the normal for nu = inf), or with `upper`
    the value exceeded with probability `q`: what `scipy.stats.t(nu).ppf` / `.isf` (`norm` for
    nu = inf) return for q in (0, 1), from the special functions they evaluate (`stdtrit`,
    `ndtri`; + 0.0 as their `loc` makes a zero +0.0). scipy.stats takes about a second to
    import, more than the analysis of a healthy run, and a frozen distribution milliseconds."""
    from scipy import special
    quantile = float(special.ndtri(q) if np.isinf(nu) else special.stdtrit(nu, q))
    return (-quantile if upper else quantile) + 0.0


@cache
def _t_mads() -> tuple[float, ...]:
    """The MAD (0.75 quantile) of t(nu) for each of `T_DEGREES`, computed on first use."""
    return tuple(t_quantile(nu, 0.75) for nu in T_DEGREES)


MAX_TAIL_FIT_POINTS = 2000  # a strided subsample keeps the fit at a millisecond per series
MIN_TAIL_FIT_POINTS = 20  # fewer positive residuals fit no tail: the default t3 is assumed
# Log-likelihood margin within which the heavier tail is kept: 1.92 is the 95% likelihood
# interval of one parameter (chi2(1) 0.95 quantile / 2); 2 rounds it up.
TAIL_SELECTION_MARGIN = 2.0
DEFAULT_TAIL_NU = 3.0  # minibatch-noise default, also used when too few points to fit
CENSORED_SHARE = 0.03  # the largest 3% of positive residuals enter the fit only as "above c"
DEFAULT_TAIL = NoiseTail(DEFAULT_TAIL_NU, RESIDUAL_MAD_SHRINK[T_DEGREES.index(DEFAULT_TAIL_NU)])


def fit_noise_tail(z: np.ndarray, censor_at_least: int = 1) -> NoiseTail:
    """Fit the Student-t degrees of freedom of a run's upper residual tail by censored likelihood.

    Method: the positive residuals x (spikes are upward, and a skewed series such as a window
    maximum `train/loss_max` has a heavier upper tail than its lower one) are compared with
    |T| for every `nu` of `T_DEGREES`, the scale set so that the medians agree (s = median(x)
    / t_nu.ppf(0.75)). The largest `CENSORED_SHARE` of the points are censored at the cut c:
    they count as log P(|T| > c / s), however large they are, so the few spikes a run holds
    cannot drag the fit towards a heavier tail, while the shape between the median and the
    97th percentile still separates a Gaussian from a t3 (a likelihood uses every point, so it
    sees a heavy tail under a bulk that looks Gaussian, such as interval-averaged heavy-tailed
    losses). `censor_at_least` raises the count of censored points (a test of the largest few
    censors all of them, so they cannot set their own null). The `nu` of highest likelihood
    wins; with fewer than `MIN_TAIL_FIT_POINTS` (not counting those extra censored ones) we
    assume nu = 3.
    """
    from scipy import special
    x = np.sort(z[np.isfinite(z) & (z > 0)])
    extra_censored = censor_at_least - 1  # beyond the one every fit censors: they do not count
    if x.size - extra_censored < MIN_TAIL_FIT_POINTS:
        return DEFAULT_TAIL
    if x.size > MAX_TAIL_FIT_POINTS:
        x = x[np.linspace(0, x.size - 1, MAX_TAIL_FIT_POINTS).astype(int)]
    censored = max(censor_at_least, int(np.ceil(CENSORED_SHARE * x.size)))
    body, cut = x[:-censored], x[-censored - 1]
    median = float(np.median(x))
    if median <= 0:
        return DEFAULT_TAIL
    body2 = body**2
    logliks = []
    for index, nu in enumerate(T_DEGREES):
        scale = median / _t_mads()[index]
        u2 = body2 / scale**2
        c2 = (cut / scale) ** 2
        if np.isinf(nu):
            log_density = -0.5 * float(np.sum(u2)) - 0.5 * body.size * np.log(2 * np.pi)
            log_two_sided_sf = float(np.log(2.0) + special.log_ndtr(-np.sqrt(c2)))
        else:
            constant = special.gammaln((nu + 1) / 2) - special.gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)
            log_density = body.size * constant - (nu + 1) / 2 * float(np.sum(np.log1p(u2 / nu)))
            log_two_sided_sf = float(np.log(max(special.betainc(nu / 2, 0.5, nu / (nu + c2)), 1e-300)))
        logliks.append(log_density - body.size * np.log(scale) + censored * log_two_sided_sf)
    # A tail lighter than the default t3 must be shown by the data: a short run (a hundred
    # points) rarely shows its tail, and a Gaussian chosen by a hair turns noise into "spikes".
    # So when the best fit is lighter than t3, keep the heaviest tail down to t3 that the data
    # cannot reject; heavier-than-t3 fits are kept as they are.
    best_index = int(np.argmax(logliks))
    chosen = best_index
    if T_DEGREES[best_index] > DEFAULT_TAIL_NU:
        chosen = min(
            (i for i, value in enumerate(logliks)
             if T_DEGREES[i] >= DEFAULT_TAIL_NU and value >= logliks[best_index] - TAIL_SELECTION_MARGIN),
            key=lambda i: T_DEGREES[i],
        )
    return NoiseTail(T_DEGREES[chosen], RESIDUAL_MAD_SHRINK[chosen])


def row_medians(a: np.ndarray) -> np.ndarray:
    """`np.median(a, axis=-1)`, the same numbers (NaN where a row holds one), by the one
    partition np.median itself makes, without its per-call overhead (~50 us, which made most of
    the stall detector's time: it fits two lines for each of 16 candidate tails of a series)."""
    width = a.shape[-1]
    half = width // 2
    middle = (half,) if width % 2 else (half - 1, half)
    part = np.partition(a, (*middle, -1), axis=-1)  # NaN sort last: the last one says if a row has one
    medians = np.add.reduce(part[..., middle[0] : half + 1], axis=-1) / len(middle)  # np.mean's sum and division
    last = part[..., -1]
    return np.where(np.isnan(last), last, medians)


class TheilSen(NamedTuple):
    slope: float
    intercept: float
    low_slope: float
    high_slope: float


def theil_sen(y: np.ndarray, x: np.ndarray, alpha: float = 0.95) -> TheilSen:
    """`scipy.stats.theilslopes(y, x, alpha)` for finite x and y, the same numbers: the median
    of the pairwise slopes, the intercept median(y) - slope median(x) (scipy's default
    `method="separate"`), and Sen's (1968) confidence interval of the slope with its correction
    for ties in x and y. Importing scipy.stats costs more than the analysis of a healthy run
    (0.5-1 s); and where scipy sorts every slope, the median and the interval's two order
    statistics need only one partition."""
    from scipy import special
    y = np.asarray(y, dtype=np.float64).ravel()
    x = np.asarray(x, dtype=np.float64).ravel()
    delta_x = x[:, np.newaxis] - x
    rising = delta_x > 0
    slopes = (y[:, np.newaxis] - y)[rising] / delta_x[rising]
    n_pairs, n = slopes.size, y.size
    if n_pairs == 0:
        return TheilSen(np.nan, np.nan, np.nan, np.nan)
    z = special.ndtri(min(alpha, 1.0 - alpha) / 2.0)
    sigma_squared = 1 / 18.0 * (n * (n - 1) * (2 * n + 5) - _tie_term(x) - _tie_term(y))
    interval = None
    if sigma_squared >= 0:
        sigma = np.sqrt(sigma_squared)
        upper = min(int(np.round((n_pairs - z * sigma) / 2.0)), n_pairs - 1)
        lower = max(int(np.round((n_pairs + z * sigma) / 2.0)) - 1, 0)
        interval = (lower, upper) if lower < n_pairs else None
    half = n_pairs // 2
    middle = (half,) if n_pairs % 2 else (half - 1, half)
    part = np.partition(slopes, sorted({*middle, *(interval or ())}))  # one partition for all
    slope = float(part[half] if n_pairs % 2 else (part[half - 1] + part[half]) / 2)  # np.median's mean
    intercept = float(np.median(y) - slope * np.median(x))
    if interval is None:
        return TheilSen(slope, intercept, np.nan, np.nan)
    return TheilSen(slope, intercept, float(part[interval[0]]), float(part[interval[1]]))


def _tie_term(values: np.ndarray) -> int:
    """Sum of k (k - 1) (2k + 5) over the groups of k > 1 equal values (Sen's eq. 2.6)."""
    _, counts = np.unique(values, return_counts=True)
    k = counts[counts > 1].astype(np.int64)
    return int(np.sum(k * (k - 1) * (2 * k + 5)))


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

    Binning by medians makes the fit robust to spikes and linear in the number of points (the
    last n mod bins points are left out of the bins); the standard error of the slope comes
    from the scatter of the bin medians around the line (ordinary least squares).
    """
    n = x.size
    if n < 6:
        return None
    bins = int(min(bins, n // 2))
    width = n // bins
    pairs = np.empty((2, bins * width))
    pairs[0], pairs[1] = x[: bins * width], y[: bins * width]
    bx, by = row_medians(pairs.reshape(2, bins, width))
    dx = bx - bx.mean()
    sxx = float(np.dot(dx, dx))
    if sxx <= 0:
        return None
    by_centred = by - by.mean()
    slope = float(np.dot(dx, by_centred) / sxx)
    residual = by_centred - slope * dx
    stderr = float(np.sqrt(np.dot(residual, residual) / max(bins - 2, 1) / sxx)) if bins > 2 else 0.0
    return LinearFit(slope, stderr, float(x[-1] - x[0]))
