"""Gradient norms computed inside the compiled step (graph mode included).

MindSpore has no function returning the global norm. Squaring float32 gradients directly
underflows to 0 below about 1e-19 and overflows to inf above about 1e19 (float32 squares). The fast
path squares and sums each gradient (two kernels per parameter); only when a sum is not safely
inside float32's range (zero, below 2^-100, or not finite) is every norm recomputed as
`peak * sqrt(sum((x / peak)^2))` with `peak = max|x|`, exact for any finite input, NaN/Inf kept.
The result is ONE small float32 vector, `[global, p_1, ..., p_k]`, the only thing the host has
to fetch per step.

`global_norm` is the cheap every-step variant for the global norm alone, without any control
flow (a run-time branch splits a compiled graph and costs about what it would save): the
gradients concatenated into one float32 vector (one kernel; per-tensor work costs a kernel
launch per parameter), cast once to float64, one sum of squares. Every finite float32 square
(2e-90 to 1.2e77) is a normal float64, so that sum neither underflows nor overflows, NaN/Inf kept.
The concatenation, its float64 cast and its squares are whole copies of the gradients: 37 bytes
of temporaries per parameter measured on the CPU (`bench/bench_norm_memory.py`: +594 MiB on a
16.8M-parameter model, where the per-tensor graph of `grad_norm_stats` adds 37 MiB and runs its
step in 0.097 s against 0.083 s). The launches the concatenation saves matter only on models
whose step is a few milliseconds of kernels, so it is used up to `LEAN_MAX_PARAMETERS`
(`lean_graph_fits`; 78 MiB of temporaries at most), and larger models run the per-tensor graph
every step: on the 3.4M-parameter benchmark model (816 ms a step) its per-parameter norms cost
0.3% (README).
"""

from __future__ import annotations

import mindspore as ms
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
LEAN_MAX_PARAMETERS = 1 << 21  # gradient values the concatenated global norm takes (docstring)


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


def global_norm(grads):
    """The L2 norm of all gradients as one float32 scalar, branch-free, exact for any float32
    gradients (see the module docstring). Usable inside `Cell.construct` and `ms.jit`."""
    flat = ops.cast(ops.concat(_hyper_map(_flat_float32, grads)), mstype.float64)
    return ops.cast(ops.sqrt(ops.reduce_sum(flat * flat)), mstype.float32)


def lean_graph_fits(parameters) -> bool:
    """Whether `global_norm` may concatenate these parameters' gradients (module docstring)."""
    return sum(int(parameter.size) for parameter in parameters) <= LEAN_MAX_PARAMETERS


def jitted_grad_norm_stats():
    """A compiled `grad_norm_stats` taking the gradients as separate arguments.

    Gradients are passed as `*grads`: a tuple passed as one argument recompiles every call.
    """

    @ms.jit
    def stats(*grads):
        return grad_norm_stats(grads)

    return stats
