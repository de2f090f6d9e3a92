"""Per-parameter gradient norms bucketed on a common step axis, for the tab's heatmap.

Rows are parameters ordered by depth (embeddings, then blocks by their number, then the rest:
final norms and heads) so that vanishing gradients show as a dark top and exploding ones as a
bright band. Columns are at most `width` buckets of consecutive logged steps (the union of every
parameter's steps); a cell holds the largest finite norm in its bucket, so a one-step explosion
stays visible at any zoom, like the min/max envelope of `views/envelope.py`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tb_health_plugin.run_data import ScalarSeries

DEFAULT_WIDTH = 400
MIN_WIDTH, MAX_WIDTH = 10, 2000
_DIGITS = re.compile(r"(\d+)")
_BLOCK_INDEX = re.compile(r"(?:^|[./_])(?:layers?|blocks?|h|encoder|decoder|stage|block)?[._]?(\d+)(?:[./]|$)")
_INPUT_SIDE = re.compile(r"embed|tok_|wte|wpe|patch|stem|conv1\b|input", re.IGNORECASE)


def depth_key(name: str) -> tuple:
    """Sort key placing a parameter at its depth: (section, block number, natural name order)."""
    natural = tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))
    block = _BLOCK_INDEX.search(name)
    if block:
        return (1, int(block.group(1)), natural)
    return (0 if _INPUT_SIDE.search(name) else 2, 0, natural)


def _bucket_max(steps: np.ndarray, values: np.ndarray, edges: np.ndarray) -> list[float | None]:
    """Largest finite value of the points falling in each bucket [edges[i], edges[i+1])."""
    out = np.full(edges.shape[0], np.nan)
    if steps.shape[0]:
        first = np.searchsorted(steps, edges, side="left")
        following = np.append(first[1:], steps.shape[0])
        nonempty = first < following
        if nonempty.any():
            finite = np.where(np.isfinite(values), values, np.nan)
            with np.errstate(invalid="ignore"):
                out[nonempty] = np.fmax.reduceat(finite, first[nonempty])
    return [None if not np.isfinite(v) else float(v) for v in out.tolist()]


def heatmap(
    per_param: dict[str, tuple[str, ScalarSeries]],
    width: int = DEFAULT_WIDTH,
    start: int | None = None,
    end: int | None = None,
) -> dict[str, Any]:
    """`per_param` maps a parameter name to (its tag, its series)."""
    names = sorted(per_param, key=depth_key)
    windows = []
    for name in names:
        series = per_param[name][1]
        lo = 0 if start is None else int(np.searchsorted(series.steps, start, side="left"))
        hi = len(series) if end is None else int(np.searchsorted(series.steps, end, side="right"))
        windows.append((series.steps[lo:hi], series.values[lo:hi]))
    union = np.unique(np.concatenate([w[0] for w in windows])) if windows else np.empty(0, dtype=np.int64)
    n = union.shape[0]
    if n == 0:
        edges = union
    elif n <= width:
        edges = union
    else:
        edges = union[np.unique(np.linspace(0, n, width + 1).astype(np.int64)[:-1])]
    return {
        "layers": names,
        "tags": [per_param[name][0] for name in names],
        "steps": edges.tolist(),
        "end_step": int(union[-1]) if n else None,
        "total_steps": int(n),
        "downsampled": bool(n > width),
        "values": [_bucket_max(steps, values, edges) for steps, values in windows],
    }
