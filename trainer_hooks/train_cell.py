"""A training cell that measures gradient health inside the compiled step.

`Model(TrainOneStepWithHealth(nn.WithLossCell(net, loss_fn), optimizer))` is the one-line
change that lets `HealthMonitor` log global and per-parameter gradient norms, the learning rate
used by each step, and (with `scale_sense`) the loss scale and the overflow flag.

The cell returns `(loss, health)`, `health` being one float32 vector laid out as below, so the
callback fetches a single small tensor per step. The overflow check is `not isfinite(global
gradient norm)`, which runs on every backend (MindSpore's own check needs NPU kernels).
"""

from __future__ import annotations

from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from trainer_hooks.norms import grad_norm_stats

# Positions in the health vector.
HEALTH_LR = 0
HEALTH_LOSS_SCALE = 1
HEALTH_OVERFLOW = 2
HEALTH_GRAD_STATS = 3  # global norm, then one norm per parameter of `optimizer.parameters`

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
    first group's with group learning rates), then the loss scale used by this step (1 without scaling), the
    overflow flag (0/1) and `[global_norm, norm per parameter]`.
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, scale_sense=None) -> None:
        super().__init__(network, optimizer)
        self.loss_scaling = scale_sense is not None
        self.scale_update = scale_sense if isinstance(scale_sense, nn.Cell) else None
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
        self.scale_sense = Parameter(Tensor(initial, mstype.float32), name="tb_health_scale_sense")
        self.group_lr = bool(optimizer.is_group_lr)
        self.hyper_map = C.HyperMap()

    def construct(self, *inputs):
        loss = self.network(*inputs)
        scale = self.scale_sense
        sens = F.fill(loss.dtype, loss.shape, 1) * F.cast(scale, F.dtype(loss))
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        if self.loss_scaling:
            grads = self.hyper_map(F.partial(_unscale, scale), grads)
        grads = self.grad_reducer(grads)
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
        head = ops.concat((lr, scale_used, ops.reshape(ops.cast(overflow, mstype.float32), (1,))))
        return loss, ops.concat((head, stats))
