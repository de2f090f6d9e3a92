"""A training cell that measures gradient health inside the compiled step.

`Model(TrainOneStepWithHealth(nn.WithLossCell(net, loss_fn), optimizer))` is the one-line
change that lets `HealthMonitor` log global and per-parameter gradient norms, the learning rate
used by each step, and (with `scale_sense`) the loss scale and the overflow flag.

The cell returns `(loss, health)`, `health` being one float32 vector laid out as below (the
loss included), so the callback fetches a single small tensor per step. The overflow
check is `not isfinite(global gradient norm)`, which runs on every backend (MindSpore's own
check needs NPU kernels).

With `device_window` the cell also keeps window aggregates of every step (max/min loss, max
gradient norm, non-finite and overflow counts) in a parameter that the callback resets after
reading it: with `dataset_sink_mode=True` on a device the callback sees one step per sink, and
these keep the other steps' spikes. When the callback sees every step it aggregates them on the
host, and `HealthMonitor` turns `device_window` off before the first step compiles the graph
(a dozen scalar kernels a step saved); the flag is read when the graph is compiled, and a graph
compiled without it marks its window fields as absent (`steps` = -1).

One compiled graph computes every norm at every step. Up to `norms.FUSED_MAX_PARAMETERS`
parameter values the norms come from `norms.row_norm_stats` (a dozen kernels for all the
parameters); above it from `norms.grad_norm_stats` (two kernels per parameter tensor, a small
share of such a model's step). An earlier version kept a second graph computing the global norm
alone for the steps not logged; the fused per-parameter norms cost less than that global norm
did, so it is gone (one compile instead of two).
"""

from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from trainer_hooks.norms import RowLayout, grad_norm_stats, row_norm_stats

# Positions in the health vector.
HEALTH_LR = 0
HEALTH_LOSS_SCALE = 1
HEALTH_OVERFLOW = 2
HEALTH_LOSS = 3  # the step's loss (its mean), float32
HEALTH_WINDOW = 4  # the WINDOW_FIELDS aggregates since the last reset
WINDOW_FIELDS = ("steps", "loss_max", "loss_min", "grad_norm_max", "nonfinite_count", "overflow_count")
WINDOW_EMPTY = (0.0, -np.inf, np.inf, -np.inf, 0.0, 0.0)
WINDOW_ABSENT = (-1.0, np.nan, np.nan, np.nan, 0.0, 0.0)  # a graph compiled without device_window
HEALTH_GRAD_STATS = HEALTH_WINDOW + len(WINDOW_FIELDS)  # global norm, then one per parameter

_unscale = C.MultitypeFuncGraph("tb_health_unscale")


@_unscale.register("Tensor", "Tensor")
def _unscale_grad(scale, grad):
    return grad * F.cast(ops.reciprocal(scale), F.dtype(grad))


class TrainOneStepWithHealth(nn.TrainOneStepCell):
    """`nn.TrainOneStepCell` that also returns a health vector.

    Args:
        network: the network with its loss (e.g. `nn.WithLossCell(net, loss_fn)`).
        optimizer: the optimizer; the per-parameter norms follow `optimizer.parameters`.
        scale_sense: `None` for no loss scaling; a number or a float Tensor for a fixed scale;
            or an update cell (`nn.DynamicLossScaleUpdateCell`, `nn.FixedLossScaleUpdateCell`).
            With loss scaling, a step whose gradients are not finite is skipped and counts as
            an overflow, like `nn.TrainOneStepWithLossScaleCell`.

    Outputs: `(loss, health)`; `health[HEALTH_LR]` is the learning rate used by this step (the
    first group's with group learning rates), then the loss scale used by this step (1 without
    scaling), the overflow flag (0/1), the loss, the window aggregates (`WINDOW_FIELDS`) and
    `[global_norm, norm per parameter]`.

    Attributes:
        device_window: keep the window aggregates on the device (default True); read when the
            graph is compiled (see the module docstring).
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, scale_sense=None) -> None:
        if isinstance(scale_sense, nn.Cell):
            initial = float(scale_sense.get_loss_scale())
        elif scale_sense is None:
            initial = 1.0
        elif isinstance(scale_sense, Tensor):
            initial = float(scale_sense.asnumpy().reshape(-1)[0])
        elif isinstance(scale_sense, (int, float)) and not isinstance(scale_sense, bool):
            initial = float(scale_sense)
        else:
            raise TypeError(
                "scale_sense must be None, a number, a Tensor or a loss-scale update cell such as "
                f"nn.DynamicLossScaleUpdateCell, got {type(scale_sense).__name__}"
            )
        if initial <= 0:
            raise ValueError(f"the loss scale must be positive, got {initial}")
        super().__init__(network, optimizer)
        self.loss_scaling = scale_sense is not None
        self.scale_update = scale_sense if isinstance(scale_sense, nn.Cell) else None
        self.scale_sense = Parameter(Tensor(initial, mstype.float32), name="tb_health_scale_sense")
        self.window = Parameter(Tensor(np.array(WINDOW_EMPTY, np.float32)), name="tb_health_window", requires_grad=False)
        self.group_lr = bool(optimizer.is_group_lr)
        self.hyper_map = C.HyperMap()
        self.device_window = True
        self.window_absent = Tensor(np.array(WINDOW_ABSENT, np.float32))
        self.fused_norms = RowLayout.fits(self.weights)  # a constant of the graph
        layout = RowLayout(parameter.size for parameter in self.weights) if self.fused_norms else None
        # graph constants of the fused path (placeholders, unused, for the per-tensor one)
        self.row_pads = layout.pads if layout else ()
        self.row_segments = layout.row_segments if layout else Tensor(np.zeros(1, np.int32))
        self.row_count = layout.count if layout else 0

    def construct(self, *inputs):
        loss = self.network(*inputs)
        scale = self.scale_sense
        sens = F.fill(loss.dtype, loss.shape, 1) * F.cast(scale, F.dtype(loss))
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        if self.loss_scaling:
            grads = self.hyper_map(F.partial(_unscale, scale), grads)
        grads = self.grad_reducer(grads)
        if self.fused_norms:
            stats = row_norm_stats(grads, self.row_pads, self.row_segments, self.row_count)
        else:
            stats = grad_norm_stats(grads)
        overflow = ops.logical_not(ops.isfinite(stats[0]))
        scale_used = ops.reshape(scale, (1,)) * 1.0  # read before the update cell changes it
        if self.scale_update is not None:
            overflow = self.scale_update(self.scale_sense, overflow)
        lr = self.optimizer.get_lr()
        if self.group_lr:
            lr = lr[0]
        lr = ops.cast(ops.reshape(lr, (1,)), mstype.float32)
        if self.loss_scaling:
            if not overflow:
                loss = F.depend(loss, self.optimizer(grads))
        else:
            loss = F.depend(loss, self.optimizer(grads))
        overflow_flag = ops.reshape(ops.cast(overflow, mstype.float32), (1,))
        loss_value = ops.reshape(ops.cast(ops.reduce_mean(loss), mstype.float32), (1,))
        if self.device_window:
            window = self._updated_window(loss_value[0], stats[0], overflow_flag)
        else:
            window = self.window_absent
        return loss, ops.concat((lr, scale_used, overflow_flag, loss_value, window, stats))

    def _updated_window(self, value, grad_norm, overflow_flag):
        """Fold this step into the window aggregates (NaN counted, kept out of max/min)."""
        loss_nan = ops.isnan(value)
        norm_nan = ops.isnan(grad_norm)
        minus_inf = ops.cast(-np.inf, mstype.float32)
        nonfinite = ops.cast(ops.logical_not(ops.isfinite(value)), mstype.float32) + ops.cast(
            ops.logical_not(ops.isfinite(grad_norm)), mstype.float32
        )
        old = self.window
        new = ops.stack(
            (
                old[0] + 1.0,
                ops.maximum(old[1], ops.select(loss_nan, minus_inf, value)),
                ops.minimum(old[2], ops.select(loss_nan, -minus_inf, value)),
                ops.maximum(old[3], ops.select(norm_nan, minus_inf, grad_norm)),
                old[4] + nonfinite,
                old[5] + overflow_flag[0],
            )
        )
        ops.assign(self.window, new)
        return new


    def reset_window(self) -> None:
        """Start new window aggregates (the callback calls this after reading them)."""
        self.window.set_data(Tensor(np.array(WINDOW_EMPTY, np.float32)))
