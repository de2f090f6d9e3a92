"""Gradient norms of early layers against late ones, with the depth read from parameter names.

Depth: the first dotted component of a parameter name that is a number (`model.layers.3.attention
.wq.weight` -> 3, `layers.0.weight` -> 0) or a word ending in one (`fc2.weight` -> 2, `h7.attn`
-> 7). Parameters without one (embeddings, heads, final norms) are left out: their norms differ
from the blocks' by design.

A layer's norm is the root of the sum of its parameters' squared norms. Per logged step, the
early level is the median log10 norm of the first third of the layers and the late level that of
the last third. Their difference is rolling-median smoothed. In a healthy network every block sees
gradients of a similar size (residual connections and normalisation keep them within about a
decade or two); a difference of `DEPTH_DECADES` (1000x) held for `sustained_length(n, 0.1)`
points means the signal dies (vanishing: early << late, e.g. stacked sigmoids shrink the
gradient by at least 4x a layer) or blows up (exploding: early >> late) on its way back through
the network. Critical at `CRITICAL_DEPTH_DECADES` (10^6x): the early layers do not train at all.

The stretch must lie after the first `SETTLED_SHARE` (a tenth) of the points, as in the zoo's
label (`bench/detection/zoo_labels.py`, rule 4, which takes the median after the first tenth):
the first updates from the random initialisation are not the network the run trains. A deep
sigmoid stack under Adam starts 1000x apart and closes the gap as it learns (zoo_dev_031: -3.1
decades over the first tenth, -2.2 in the median after it, -1.4 at the end); counting its
first 31 of 248 points called a run vanishing that its label, and its own later norms, did not.
The reported start still walks back into the first tenth while the gap itself stands beyond
`DEPTH_DECADES` there.

A gap the run closed by itself is info, not an alarm: when the stretch ends before the run
does and the median gap over the settled points (the zoo label's own measure) is under
`DEPTH_DECADES`, the early layers trained at the rate of the late ones for most of the run. Deep
sigmoid stacks under Adam do this (zoo_seen25_108: 7,700x from step 1 to step 90 of 352, then
closed; zoo_seen17_071 and zoo_seen18_062 alike), none of them vanishing by its label, and a
warning that says "use ReLU/GELU" on a run that trained teaches people to skip the tab.
Points whose loss is NaN or Inf are left out by the caller (`checks.gradients`), as in the
label: their gradients are the non-finite event's.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from tb_health_plugin.analysis.detectors.robust import rolling_median
from tb_health_plugin.analysis.detectors.robust_levels import (
    first_sustained_run,
    median_window,
    safe_log10,
    sustained_length,
)
from tb_health_plugin.analysis.event import Event

DEPTH_DECADES = 3.0
CRITICAL_DEPTH_DECADES = 6.0
MIN_LAYERS = 3
SETTLED_SHARE = 0.1  # the first tenth of the points never makes the imbalance (see module doc)
MIN_POINTS = 3
_NUMBERED_WORD = re.compile(r"^[A-Za-z_]*?(\d+)$")


def layer_index(param: str) -> int | None:
    """The block number in a parameter name, or None (see module doc)."""
    parts = re.split(r"[./]", param)
    for part in parts:
        if part.isdigit():
            return int(part)
    for part in parts[:-1]:  # the last part is the tensor's own name (`weight`, `bias`, `w1`)
        match = _NUMBERED_WORD.match(part)
        if match:
            return int(match.group(1))
    return None


def layer_norms(
    per_param: dict[str, tuple[np.ndarray, np.ndarray]],
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Align per-parameter (steps, norms) on their common steps and combine them per layer.

    Returns (sorted layer indices, common steps, norms of shape (layers, steps)).
    """
    by_layer: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for param, series in per_param.items():
        depth = layer_index(param)
        if depth is not None:
            by_layer.setdefault(depth, []).append(series)
    if not by_layer:
        return [], np.empty(0, dtype=np.int64), np.empty((0, 0))
    common = None
    for series_list in by_layer.values():
        for steps, _ in series_list:
            common = steps if common is None else np.intersect1d(common, steps)
    depths = sorted(by_layer)
    norms = np.zeros((len(depths), common.size))
    for row, depth in enumerate(depths):
        squares = np.zeros(common.size)
        for steps, values in by_layer[depth]:
            picked = np.asarray(values, dtype=np.float64)[np.searchsorted(steps, common)]
            squares = squares + picked**2
        norms[row] = np.sqrt(squares)
    return depths, common, norms


def depth_imbalance(norms: np.ndarray, steps: np.ndarray | None = None, tag: str = "") -> Event | None:
    """Early-vs-late layer gradient imbalance over time (see module doc); `norms` is (layers, steps).

    `steps`: the logged step of each column (default: its index); `tag`: the tag to name."""
    layers, n = norms.shape if norms.ndim == 2 else (0, 0)
    if layers < MIN_LAYERS or n < MIN_POINTS:
        return None
    third = max(1, layers // 3)
    logs = safe_log10(norms)
    logs[norms == 0] = -np.inf
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # steps where every norm is NaN
        early = np.nanmedian(logs[:third], axis=0)
        late = np.nanmedian(logs[-third:], axis=0)
        gap = early - late
    gap[~np.isfinite(early) | ~np.isfinite(late)] = np.nan
    if np.all(np.isnan(gap)):
        return None
    level = rolling_median(gap, median_window(n), edges="mirror")
    min_length = sustained_length(n, share=0.1)
    settled = np.arange(n) >= int(SETTLED_SHARE * n)
    for kind, mask in (
        ("vanishing_gradients", settled & (level <= -DEPTH_DECADES)),
        ("exploding_gradients", settled & (level >= DEPTH_DECADES)),
    ):
        run = first_sustained_run(mask, min_length)
        if run is None:
            continue
        start, stop = run
        while (
            start - 1 >= 0
            and abs(gap[start - 1]) >= DEPTH_DECADES
            and np.sign(gap[start - 1]) == np.sign(level[start])
        ):
            start -= 1
        stretch = gap[start:stop] if np.isfinite(gap[start:stop]).any() else level[start:stop]  # a dead layer's gap is NaN
        decades = float(np.nanmedian(np.abs(stretch)))
        ratio = 10.0 ** float(np.nanmedian(stretch))
        vanish = kind == "vanishing_gradients"
        closed = stop < n and abs(float(np.nanmedian(level[settled]))) < DEPTH_DECADES
        message = "gradients.depth.vanishing" if vanish else "gradients.depth.exploding"
        advice = "gradients.advice.depth_vanishing" if vanish else "gradients.advice.depth_exploding"
        severity = "critical" if decades >= CRITICAL_DEPTH_DECADES else "warning"
        return Event(
            kind=kind,
            severity="info" if closed else severity,
            step=int(start if steps is None else steps[start]),
            end_step=int(stop - 1 if steps is None else steps[stop - 1]),
            tag=tag,
            message=message + ".closed" if closed else message,
            evidence={
                "early_to_late_ratio": ratio,
                "early_layers": third,
                "late_layers": third,
                "layers": layers,
            },
            args={"smaller_factor": 1 / ratio} if vanish else {},
            advice=None if closed else advice,
        )
    return None
