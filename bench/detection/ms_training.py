"""Small real MindSpore CPU trainings with injected faults, for the detection benchmark.

Run as a separate process (`python -m bench.detection.ms_training SPEC_JSON OUT_DIR`): importing
MindSpore switches protobuf to its slow pure-Python implementation and writes scratch folders
into the working directory, neither of which the benchmark process should suffer. Each spec
trains a two-layer MLP on a fixed synthetic classification set with SGD and momentum, and saves
the per-step loss and learning rate as `<name>.npz`.

Faults: `lr_high_from` (the learning rate jumps x`lr_factor` at that step), `corrupt_at` (a few
batches of scaled, shuffled inputs with random labels), and a learning rate far too small
(`lr` itself).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

FEATURES, CLASSES, HIDDEN, SAMPLES = 32, 8, 64, 4096


def dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.0, (CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, SAMPLES)
    inputs = centres[labels] + rng.normal(0, 1.6, (SAMPLES, FEATURES))
    return inputs.astype(np.float32), labels.astype(np.int32)


def lr_at(spec: dict, step: int) -> float:
    lr = spec["lr"]
    if spec.get("warmup"):
        lr *= min(1.0, (step + 1) / spec["warmup"])
    if spec.get("cosine"):
        lr *= 0.55 + 0.45 * np.cos(np.pi * step / spec["steps"])
    if spec.get("lr_high_from") is not None and step >= spec["lr_high_from"]:
        lr *= spec["lr_factor"]
    return float(lr)


def train(spec: dict) -> dict[str, np.ndarray]:
    import mindspore as ms
    from mindspore import Tensor, nn, ops

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(spec["seed"])
    inputs, labels = dataset(spec["data_seed"])
    rng = np.random.default_rng(spec["seed"])
    net = nn.SequentialCell([nn.Dense(FEATURES, HIDDEN), nn.ReLU(), nn.Dense(HIDDEN, CLASSES)])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=spec["lr"], momentum=0.9)
    step_cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    step_cell.set_train()
    corrupt = set(range(spec["corrupt_at"], spec["corrupt_at"] + spec.get("corrupt_steps", 1))) if spec.get(
        "corrupt_at"
    ) is not None else set()
    losses, rates = [], []
    batch = spec["batch"]
    for step in range(spec["steps"]):
        rate = lr_at(spec, step)
        ops.assign(optimizer.learning_rate, Tensor(rate, ms.float32))
        index = rng.integers(0, SAMPLES, batch)
        x, y = inputs[index], labels[index]
        if step in corrupt:  # a corrupted shard: garbage inputs at a large scale, random labels
            x = (rng.permutation(x.ravel()).reshape(x.shape) * spec.get("corrupt_scale", 6.0)).astype(np.float32)
            y = rng.integers(0, CLASSES, batch).astype(np.int32)
        loss = step_cell(Tensor(x), Tensor(y))
        losses.append(float(loss.asnumpy()))
        rates.append(rate)
    return {"loss": np.array(losses), "lr": np.array(rates)}


def main(argv: list[str]) -> int:
    specs = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ms-bench-") as scratch:
        os.chdir(scratch)  # MindSpore and MindFormers write rank_0/, akg_kernel_meta/ here
        for spec in specs:
            result = train(spec)
            np.savez(out / f"{spec['name']}.npz", **result)
            print(f"trained {spec['name']}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
