"""Summary numbers of a logged histogram: the L2 norm, mean, spread and mass at the edges.

Buckets are (left, right, count) rows (`series.HistogramSeries`). Each bucket's values are taken
at its centre, so the norm is sqrt(sum count * centre^2): exact to within half a bucket width,
which is far finer than the orders of magnitude the gradient and weight detectors look for.
"""

from __future__ import annotations

import numpy as np


def _centres_counts(buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    buckets = np.asarray(buckets, dtype=np.float64).reshape(-1, 3)
    return (buckets[:, 0] + buckets[:, 1]) / 2.0, buckets[:, 2]


def histogram_norm(buckets: np.ndarray) -> float:
    """Approximate L2 norm of the tensor the histogram summarises."""
    centres, counts = _centres_counts(buckets)
    if counts.sum() <= 0:
        return float("nan")
    return float(np.sqrt(np.sum(counts * centres**2)))


def edge_share(buckets: np.ndarray, edge_fraction: float = 0.05) -> float:
    """Share of the values lying in the outer `edge_fraction` of the histogram's range, each side.

    A bell-shaped weight distribution keeps well under 1% of its mass there; values piling up
    against the extremes (saturated or clipped weights) push it up.
    """
    buckets = np.asarray(buckets, dtype=np.float64).reshape(-1, 3)
    total = buckets[:, 2].sum()
    if total <= 0 or buckets.shape[0] < 3:
        return float("nan")
    low, high = buckets[:, 0].min(), buckets[:, 1].max()
    span = high - low
    if span <= 0:
        return float("nan")
    centres = (buckets[:, 0] + buckets[:, 1]) / 2.0
    outer = (centres <= low + edge_fraction * span) | (centres >= high - edge_fraction * span)
    return float(buckets[outer, 2].sum() / total)
