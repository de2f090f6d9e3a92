"""The learning rate a given step used, read from the optimizer's schedule.

`optimizer.get_lr()` after a step returns the NEXT step's rate (its `global_step` has already
advanced) and, with a list of rates, raises after the final step. The rate of step `n`
(counting from 1) is the schedule evaluated at index `n - 1`.
"""

from __future__ import annotations

import numpy as np


def lr_of_step(optimizer, step: int) -> float | None:
    """The (first group's) learning rate used by `step`, or None when it cannot be told."""
    try:
        from mindspore import Tensor
        from mindspore.common import dtype as mstype

        rate = optimizer.learning_rate
        if optimizer.is_group_lr:
            rate = rate[0]
        if optimizer.dynamic_lr:
            rate = rate(Tensor(max(step - 1, 0), mstype.int32))
        values = np.asarray(rate.asnumpy(), dtype=np.float64).reshape(-1)
        return float(values[0]) if values.size else None
    except Exception:
        return None
