"""When `stop_on_critical` stops a training at the very step, without waiting for the analysis."""

from __future__ import annotations

import math
from collections.abc import Mapping


def nonfinite_update(
    loss: float, grad_norm: float | None, overflowed: bool | None, window: Mapping[str, float] | None
) -> bool:
    """Whether this step's loss is non-finite, or its gradient norm is on a step whose update
    was applied. A non-finite gradient norm on a step the loss scaler flagged as an overflow
    (`overflowed`; None when the training passes no flag) was skipped (update thrown away,
    scale lowered): that is dynamic loss scaling working, not damage."""
    if window is not None:
        # several steps at once (sink mode): the cell counted non-finite losses plus norms,
        # and (with loss scaling, when the flag is passed) the norms that were overflows
        skipped = int(window.get("overflow_count", 0)) if overflowed is not None else 0
        return int(window.get("nonfinite_count", 0)) > skipped
    if not math.isfinite(loss):
        return True
    return grad_norm is not None and not math.isfinite(grad_norm) and not overflowed
