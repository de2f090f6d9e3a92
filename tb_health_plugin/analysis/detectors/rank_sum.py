"""The one-sided Mann-Whitney U test, as `scipy.stats.mannwhitneyu` computes it by default.

Why not scipy.stats itself: the detectors' only use of it was this test (a slowdown of step
times, a loss that fell while the gradient norm rose), and importing scipy.stats costs about
45 MiB of resident memory and most of a second of CPU in every process that analyses a run with
step times: the Health tab's worker, and each `tb-health check` of such runs (one 8-rank job of
the hooks' logs: 1.84 -> 1.10 CPU s, 101 -> 57 MiB). The numbers are scipy's
(`tests/test_rank_sum.py` compares them on small and large samples, ties and infinities, both
directions):

- U of the first sample: its rank sum (ties take their average rank) less n1 (n1 + 1) / 2;
  "less" tests the second sample's U instead. The p-value is P(U >= the U observed).
- scipy's `method="auto"`: the exact null distribution when either sample has at most 8 values
  and no value is tied; otherwise the normal approximation with the tie correction and the
  continuity correction (0.5 subtracted, since the upper tail is what is computed).
- The exact distribution counts, for each U, the orderings of the two samples that give it: the
  coefficients of the Gaussian binomial coefficient [n1 + n2 choose n1] in q, built as the
  product over i = 1..m of (1 - q^(n+i)) / (1 - q^i) with m the smaller size, in exact integers
  (about m^2 n additions), cached per pair of sizes.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import accumulate

import numpy as np

EXACT_MAX_SIZE = 8  # scipy's rule: exact when a sample is this small and nothing is tied


def mann_whitney_p(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """P-value of x being stochastically greater (`alternative="greater"`) or less ("less")
    than y; NaN when a sample is empty or holds NaN (scipy's default policy)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0 or np.isnan(x).any() or np.isnan(y).any():
        return math.nan
    values, inverse, ties = np.unique(np.concatenate([x, y]), return_inverse=True, return_counts=True)
    average_ranks = np.cumsum(ties) - (ties - 1) / 2.0
    u1 = float(average_ranks[inverse[:n1]].sum()) - n1 * (n1 + 1) / 2.0
    if alternative == "greater":
        u = u1
    elif alternative == "less":
        u = n1 * n2 - u1
    else:
        raise ValueError(f"alternative must be 'greater' or 'less', not {alternative!r}")
    tied = values.size < n1 + n2
    if min(n1, n2) <= EXACT_MAX_SIZE and not tied:
        return _exact_upper_tail(int(round(u)), min(n1, n2), max(n1, n2))
    return _normal_upper_tail(u, n1, n2, ties)


def _normal_upper_tail(u: float, n1: int, n2: int, ties: np.ndarray) -> float:
    from scipy import special

    n = n1 + n2
    tie_term = float(np.sum(ties.astype(np.float64) ** 3 - ties))
    spread = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.float64(u - n1 * n2 / 2.0 - 0.5) / np.float64(spread)
    return float(np.clip(special.ndtr(-z), 0.0, 1.0))


def _exact_upper_tail(u: int, m: int, n: int) -> float:
    tails = _upper_tails(m, n)
    return float(tails[u]) if 0 <= u < tails.size else (1.0 if u < 0 else 0.0)


@lru_cache(maxsize=256)
def _upper_tails(m: int, n: int) -> np.ndarray:
    """P(U >= u) for u = 0..m*n, with m <= n the sizes of the two samples."""
    total = math.comb(m + n, m)
    upper = list(accumulate(reversed(_orderings_by_u(m, n))))[::-1]  # exact integers, then divided
    return np.array([count / total for count in upper], dtype=np.float64)


def _orderings_by_u(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) orderings give each U = 0..m*n (module docstring)."""
    counts = [1]
    for i in range(1, m + 1):
        shift = n + i
        grown = counts + [0] * (n + i)  # degree (i-1) n grows by n + i before the division
        for k in range(len(grown) - 1, shift - 1, -1):  # times (1 - q^(n+i)), from the top
            grown[k] -= grown[k - shift]
        for k in range(i, len(grown)):  # over (1 - q^i): a running sum with stride i
            grown[k] += grown[k - i]
        counts = grown[: i * n + 1]  # the i highest terms are zero now
    return counts
