"""Robust level tracking shared by the gradient, weight and throughput detectors.

Training signals are noisy and logged at uneven intervals, so the detectors compare *levels*
(rolling medians of log10 values) rather than single points, and require a condition to hold for
a run of consecutive points before calling it a problem. A rolling median of width w ignores up to
(w-1)/2 outliers in a window, which is what makes a single spike or a single NaN harmless here.
"""

from __future__ import annotations

import numpy as np

# The first points of a run are dominated by initialisation (large gradient norms, compilation in
# step times, a loss scale calibrating itself): this share of the points is never a baseline.
WARMUP_SHARE = 0.05
MIN_WARMUP_POINTS = 2


def warmup_points(n: int) -> int:
    """How many leading points of an n-point series belong to the warm-up."""
    return min(n, max(MIN_WARMUP_POINTS, int(np.ceil(WARMUP_SHARE * n))))


def median_window(n: int) -> int:
    """An odd rolling-median width: about 5% of the series, between 3 and 21 points."""
    width = int(np.clip(n // 20, 3, 21))
    return width if width % 2 else width + 1


def safe_log10(values: np.ndarray) -> np.ndarray:
    """log10 of positive finite values; NaN for zero, negative and non-finite ones."""
    values = np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    ok = np.isfinite(values) & (values > 0)
    out[ok] = np.log10(values[ok])
    return out


def runs_of_true(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) index pairs, stop exclusive, of each run of consecutive True values."""
    mask = np.asarray(mask, dtype=bool)
    if mask.size == 0:
        return []
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def first_sustained_run(mask: np.ndarray, min_length: int) -> tuple[int, int] | None:
    """The first run of at least `min_length` consecutive True values, or None."""
    for start, stop in runs_of_true(mask):
        if stop - start >= min_length:
            return start, stop
    return None


def sustained_length(n: int, share: float = 0.05, floor: int = 3) -> int:
    """Points a condition must hold for: `share` of the series, at least `floor`."""
    return max(floor, int(np.ceil(share * n)))
