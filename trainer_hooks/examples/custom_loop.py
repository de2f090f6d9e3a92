"""A custom loop on `mindspore.value_and_grad` with `HealthLogger`, in PyNative or graph (`jit`) mode.

    python -m trainer_hooks.examples.custom_loop --log-dir runs/custom_loop [--jit]
"""

from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from trainer_hooks import HealthLogger, grad_norm_stats, lr_of_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", default="runs/custom_loop")
    parser.add_argument("--jit", action="store_true", help="compile the step with ms.jit (graph mode)")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 1))
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    schedule = [1e-2 * 0.99**i for i in range(args.steps)]
    optimizer = nn.SGD(net.trainable_params(), learning_rate=schedule)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def jit_step(x, y):
        loss, grads = grad_fn(x, y)
        # norms inside the compiled step: one small vector comes back
        return ops.depend(loss, optimizer(grads)), grad_norm_stats(grads)

    with HealthLogger(args.log_dir, collect_freq=10, parameters=net, batch_size=32) as health:
        for step in range(1, args.steps + 1):
            x = rng.normal(size=(32, 16)).astype(np.float32)
            y = x.sum(axis=1, keepdims=True)
            if args.jit:
                loss, stats = jit_step(Tensor(x), Tensor(y))
                health.log_step(step, loss, grad_stats=stats, lr=lr_of_step(optimizer, step))
            else:
                loss, grads = grad_fn(Tensor(x), Tensor(y))
                optimizer(grads)
                health.log_step(step, loss, grads=grads, lr=lr_of_step(optimizer, step))
            if health.should_stop:  # only with stop_on_critical=True
                break


if __name__ == "__main__":
    main()
