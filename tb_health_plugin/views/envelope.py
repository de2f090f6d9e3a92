"""Min/max envelope downsampling of a scalar series for display.

Charts get at most `width` buckets of consecutive points, each with its min, max and mean over
the finite values, so a one-step spike survives any zoom level (a plain stride or TensorBoard's
reservoir sample would drop it). Non-finite points are listed separately, never averaged away.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_health_plugin.run_data import ScalarSeries

DEFAULT_WIDTH = 1000
MIN_WIDTH, MAX_WIDTH = 10, 20000
MAX_NONFINITE_LISTED = 1000


def _nullable(array: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in array.tolist()]


def envelope(
    series: ScalarSeries, width: int = DEFAULT_WIDTH, start: int | None = None, end: int | None = None
) -> dict[str, Any]:
    """Bucketed first step (and its wall time), min, max and mean of the points with start <= step <= end."""
    lo = 0 if start is None else int(np.searchsorted(series.steps, start, side="left"))
    hi = len(series) if end is None else int(np.searchsorted(series.steps, end, side="right"))
    steps = series.steps[lo:hi]
    values = series.values[lo:hi]
    walls = series.wall_times[lo:hi]
    n = steps.shape[0]
    finite = np.isfinite(values)
    nonfinite_steps = steps[~finite]
    nonfinite = [
        {"step": int(s), "value": "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")}
        for s, v in zip(nonfinite_steps[:MAX_NONFINITE_LISTED].tolist(), values[~finite][:MAX_NONFINITE_LISTED].tolist(), strict=False)
    ]
    result: dict[str, Any] = {
        "total_points": n,
        "downsampled": n > width,
        "nonfinite": nonfinite,
        "nonfinite_total": int(nonfinite_steps.shape[0]),
        # the run's clock: the tab's relative and wall-time axes, as TensorBoard's Scalars tab
        "first_wall_time": float(series.wall_times[0]) if len(series) else None,
    }
    if n == 0:
        result.update(steps=[], min=[], max=[], mean=[], wall_times=[])
        return result
    if n <= width:
        shown = np.where(finite, values, np.nan)
        result.update(
            steps=steps.tolist(), min=_nullable(shown), max=_nullable(shown), mean=_nullable(shown), wall_times=walls.tolist()
        )
        return result
    starts = np.unique(np.linspace(0, n, width + 1).astype(np.int64)[:-1])
    counts = np.add.reduceat(finite.astype(np.int64), starts)
    mins = np.minimum.reduceat(np.where(finite, values, np.inf), starts)
    maxs = np.maximum.reduceat(np.where(finite, values, -np.inf), starts)
    sums = np.add.reduceat(np.where(finite, values, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    empty = counts == 0
    mins[empty] = np.nan
    maxs[empty] = np.nan
    result.update(
        steps=steps[starts].tolist(),
        min=_nullable(mins),
        max=_nullable(maxs),
        mean=_nullable(means),
        wall_times=walls[starts].tolist(),
    )
    return result
