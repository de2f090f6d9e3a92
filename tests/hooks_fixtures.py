"""Helpers of the trainer_hooks tests: read back logs with TensorBoard's own EventAccumulator,
and build the tiny MindSpore trainings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


class ManualClock:
    """A clock (seconds) that only the test moves: timings are checked on events, not on sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def accumulator(run_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
    acc.Reload()
    return acc


def scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value}, read by TensorBoard's EventAccumulator."""
    acc = accumulator(run_dir)
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def texts(run_dir: Path, tag: str) -> list[tuple[int, str]]:
    acc = accumulator(run_dir)
    if tag not in acc.Tags()["tensors"]:
        return []
    return [(e.step, e.tensor_proto.string_val[0].decode("utf-8")) for e in acc.Tensors(tag)]


def findings(run_dir: Path) -> list[tuple[int, dict]]:
    return [(step, json.loads(text)) for step, text in texts(run_dir, "health/findings")]


def regression_data(samples: int = 64, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features)).astype(np.float32)
    y = (x @ rng.normal(size=(features, 1))).astype(np.float32)
    return x, y


def teacher_batches(rng: np.random.Generator, steps: int, batch: int, features: int, classes: int, noise: float):
    """Minibatches of a noisy teacher classifier: y = argmax(x @ teacher + noise * N(0, 1))."""
    teacher = rng.normal(size=(features, classes))
    for _ in range(steps):
        x = rng.normal(size=(batch, features)).astype(np.float32)
        yield x, np.argmax(x @ teacher + noise * rng.normal(size=(batch, classes)), axis=1).astype(np.int32)


def train_classifier_with_hooks(log_dir: Path, net, optimizer, batches, batch_size: int, collect_freq: int) -> None:
    """The README's custom loop: `value_and_grad` under `ms.jit`, the norms from `grad_norm_stats`,
    `HealthLogger.log_step` every step (cross-entropy over integer labels)."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops

    from trainer_hooks import HealthLogger, grad_norm_stats, lr_of_step

    loss_net = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        return ops.depend(loss, optimizer(grads)), grad_norm_stats(grads)

    with HealthLogger(str(log_dir), collect_freq=collect_freq, parameters=net, batch_size=batch_size) as health:
        for step, (x, y) in enumerate(batches, start=1):
            loss, stats = train_step(Tensor(x), Tensor(y))
            health.log_step(step, loss, grad_stats=stats, lr=lr_of_step(optimizer, step))
