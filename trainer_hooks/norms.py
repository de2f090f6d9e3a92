"""Gradient norms computed inside the compiled step (graph mode included).

MindSpore has no function returning the global norm. Squaring float32 gradients directly
underflows to 0 below about 1e-19 and overflows to inf above about 1e19 (float32 squares). Both paths
below square and sum in float32 and are exact for any finite normal float32 input, NaN/Inf kept
(float32 denormals may read as 0 where the CPU flushes them). The result is ONE small float32
vector, `[global, p_1, ..., p_k]`, the only thing the host has to fetch per step.

Two ways to the same vector. `grad_norm_stats` squares and sums each gradient: two kernels per
parameter tensor, a few tens of microseconds each on the CPU, a tenth of a small model's step.
`row_norm_stats` takes a `RowLayout` built once from the parameters' sizes: the gradients are
concatenated (one kernel, each padded with zeros to whole rows of `ROW_VALUES`), squared and
summed per row at three power-of-two scales (so no row under- or overflows, without a run-time
branch: see its docstring), and the row sums (one float64 value per row: 1/128 of the values)
are added per parameter with one segment sum, in float64, so neither the per-parameter nor the
global sum can overflow or lose a small parameter beside a large one. About two dozen kernels
whatever the number of parameters: on the 2-layer benchmark model (27 tensors, 397k values) it
costs less than the float64 global norm alone did (README, "Overhead"). Its temporaries (the
concatenated copy, scaled copies and squares: +225 MiB measured on 16.8M values, about 14 bytes
per value) bound it to `FUSED_MAX_PARAMETERS`; larger models, whose steps are long enough, use
the per-tensor path, which falls back to the scaled per-tensor norms (one run-time branch) when a sum is out of
float32's safe range.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import ops
from mindspore.common import dtype as mstype
from mindspore.ops import composite as C

FLOAT32_TINY = 1.1754944e-38  # smallest normal float32: the divisor floor for an all-zero tensor
# A sum of squares below this may have lost terms to underflow (2^-100: float32 keeps 24-bit
# precision down to 2^-126, so squares 2^26 times smaller than the sum are still represented).
SAFE_SQUARE_SUM = 2.0**-100

_param_norm = C.MultitypeFuncGraph("tb_health_param_norm")
_flat_float32 = C.MultitypeFuncGraph("tb_health_flat_float32")
_square_sum = C.MultitypeFuncGraph("tb_health_square_sum")
FUSED_MAX_PARAMETERS = 1 << 21  # gradient values `row_norm_stats` concatenates (docstring): about 28 MiB of temporaries
ROW_VALUES = 128  # values per row of the fused layout: 128x fewer row sums than values, little padding
# Typed constants (a Python float in a graph becomes a float32 scalar: 2^-200 would be 0).
_SCALE_UP = ms.Tensor(2.0**100, mstype.float32)
_SCALE_DOWN = ms.Tensor(2.0**-70, mstype.float32)
_UNSCALE_UP = ms.Tensor(2.0**-200, mstype.float64)
_UNSCALE_DOWN = ms.Tensor(2.0**140, mstype.float64)
_SAFE_ROW_SUM = ms.Tensor(2.0**-90, mstype.float64)


@_square_sum.register("Tensor")
def _plain_square_sum(tensor):
    values = ops.cast(tensor, mstype.float32)
    return ops.reduce_sum(values * values)


@_flat_float32.register("Tensor")
def _flat_as_float32(tensor):
    return ops.reshape(ops.cast(tensor, mstype.float32), (-1,))  # no kernel for float32 gradients


@_param_norm.register("Tensor")
def _scaled_l2_norm(tensor):
    values = ops.cast(tensor, mstype.float32)
    peak = ops.maximum(ops.reduce_max(ops.abs(values)), FLOAT32_TINY)
    return peak * ops.sqrt(ops.reduce_sum(ops.square(values / peak)))


def scaled_l2_norm(vector):
    """The L2 norm of a float32 tensor without underflow or overflow of its squares."""
    return _scaled_l2_norm(vector)


_hyper_map = C.HyperMap()


def grad_norm_stats(grads):
    """`[global_norm, norm(grads[0]), ..., norm(grads[-1])]` as one float32 vector.

    Usable inside `ms.jit` functions, `Cell.construct` (graph mode) and PyNative code.
    """
    square_sums = ops.stack(_hyper_map(_square_sum, grads))
    in_range = ops.logical_and(ops.isfinite(square_sums), square_sums > SAFE_SQUARE_SUM)
    if in_range.all():
        per_param = ops.sqrt(square_sums)
    else:
        per_param = ops.stack(_hyper_map(_param_norm, grads))
    global_norm = scaled_l2_norm(per_param)
    return ops.concat((ops.expand_dims(global_norm, 0), per_param))


class RowLayout:
    """Where each parameter's gradient lies in `row_norm_stats`' rows, built once from the sizes.

    `pads[i]` is `()` or a one-element tuple holding the zeros that fill parameter i's last row;
    `row_segments[r]` is the parameter of row r; `count` is the number of parameters.
    """

    def __init__(self, sizes) -> None:
        sizes = [int(size) for size in sizes]
        fill = [-size % ROW_VALUES for size in sizes]
        self.pads = tuple((ms.Tensor(np.zeros(gap, np.float32)),) if gap else () for gap in fill)
        rows = [(size + gap) // ROW_VALUES for size, gap in zip(sizes, fill, strict=True)]
        self.row_segments = ms.Tensor(np.repeat(np.arange(len(sizes), dtype=np.int32), rows))
        self.count = len(sizes)

    @staticmethod
    def fits(parameters) -> bool:
        """Whether these parameters are few enough for the fused path (module docstring)."""
        return sum(int(parameter.size) for parameter in parameters) <= FUSED_MAX_PARAMETERS


def row_norm_stats(grads, pads, row_segments, count):
    """`grad_norm_stats(grads)` from a fixed two dozen kernels and no branch: the gradients in
    rows of `ROW_VALUES` (`RowLayout` gives `pads`, `row_segments` and `count`).

    Each row's float32 sum of squares is taken three times: as is, scaled up by 2^100 and down by
    2^-70 (exact powers of two). A row whose plain sum is finite and at least 2^-90 keeps it (the
    squares lost to underflow, under 2^-126 each, are then below 2^-29 of the sum); a smaller one
    takes the scaled-up sum (all its values are under 2^-45, so their squares times 2^200 stay
    under float32's limit, and no normal float32 is lost); a non-finite one takes the
    scaled-down sum (values up to float32's limit, 2^128, square to at most 2^116 each). The
    chosen row sums go to float64, undo their scale and are added per parameter. NaN and Inf
    stay not finite. Usable inside `Cell.construct` (graph mode) and PyNative code.
    """
    rows = fused_rows(grads, pads)
    up = rows * _SCALE_UP
    down = rows * _SCALE_DOWN
    plain_sums = ops.cast(ops.reduce_sum(rows * rows, 1), mstype.float64)
    up_sums = ops.cast(ops.reduce_sum(up * up, 1), mstype.float64) * _UNSCALE_UP
    down_sums = ops.cast(ops.reduce_sum(down * down, 1), mstype.float64) * _UNSCALE_DOWN
    finite = ops.isfinite(plain_sums)
    safe = ops.logical_and(finite, plain_sums >= _SAFE_ROW_SUM)
    row_sums = ops.select(safe, plain_sums, ops.select(finite, up_sums, down_sums))
    return norms_from_row_sums(row_sums, row_segments, count)


def fused_rows(grads, pads):
    """The gradients as float32 rows of `ROW_VALUES`, each padded with zeros to whole rows (one
    concatenation: the layout `row_norm_stats` sums)."""
    flats = _hyper_map(_flat_float32, grads)
    pieces = ()
    for index in range(len(flats)):  # unrolled when compiled: one concatenation of every piece
        pieces = pieces + (flats[index],) + pads[index]
    return ops.reshape(ops.concat(pieces), (-1, ROW_VALUES))


def norms_from_row_sums(row_sums, row_segments, count):
    """`[global, per parameter]` norms (float32) from the rows' float64 sums of squares, added per
    parameter with one segment sum."""
    square_sums = ops.unsorted_segment_sum(row_sums, row_segments, count)
    global_norm = ops.sqrt(ops.reduce_sum(square_sums))
    return ops.cast(ops.concat((ops.reshape(global_norm, (1,)), ops.sqrt(square_sums))), mstype.float32)


def jitted_grad_norm_stats():
    """A compiled `grad_norm_stats` taking the gradients as separate arguments.

    Gradients are passed as `*grads`: a tuple passed as one argument recompiles every call.
    """

    @ms.jit
    def stats(*grads):
        return grad_norm_stats(grads)

    return stats
