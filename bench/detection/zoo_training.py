"""Train the zoo: small real MindSpore CPU trainings with randomised settings (see `cases_zoo`).

Run as a separate process (`python -m bench.detection.zoo_training SPECS_JSON OUT_DIR`), from a
scratch working directory: importing MindSpore switches protobuf to its pure-Python backend and
MindSpore writes `rank_0/`, `akg_kernel_meta/` into the working directory.

For each spec it trains one network in graph mode and keeps, for every step, the raw loss, the
global gradient norm (`trainer_hooks.grad_norm_stats`, no float32 under/overflow), the learning
rate the step used and the step's wall time, in `<name>.npz`; and the logs that the spec's
logging path wrote while training, in `<name>.logs/`:

- `hooks_logger`: our `trainer_hooks.HealthLogger` in a custom loop (README section 2);
- `hooks_monitor`: `Model.train` with our `trainer_hooks.HealthMonitor` (README section 1);
- `custom`: a hand-written loop logging `loss` and `lr` every N steps with TensorBoard's writer;
- `mindformers`: tensorboardX scalars the way MindFormers names them (`loss`, `learning-rate`,
  `global_norm`, and the `loss_vs_samples` twin) into `rank_0/`;
- `hf`: Hugging Face Trainer style, the mean loss over each `logging_steps` window as
  `train/loss` with `train/learning_rate` and `train/grad_norm`;
- `summary_collector`: `Model.train` with MindSpore's `SummaryCollector`
  (`collect_dataset_graph: False`), which writes `loss/auto`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

INPUT_FEATURES = 32
CLASSES = 8
IMAGE = 8
SEQ, D_MODEL = 8, 16
SAMPLES = 2048
# Static loss scales of the `loss_scale` precision: large enough that float16 may overflow.
LOSS_SCALES = (2.0**10, 2.0**14, 2.0**16)


def lr_at(spec: dict, step: int) -> float:
    """The rate step `step` (from 0) uses under the spec's schedule."""
    base, total = spec["lr"], spec["steps"]
    if spec["schedule"] == "constant":
        return float(base)
    if spec["schedule"] == "warmup_cosine":
        warmup = max(1, int(total * spec["warmup_share"]))
        if step < warmup:
            return float(base * (step + 1) / warmup)
        progress = (step - warmup) / max(1, total - warmup)
        return float(base * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress))))
    # step decay: x0.1 at each of the milestones
    drops = sum(step >= int(total * m) for m in spec["milestones"])
    return float(base * 0.1**drops)


def dataset(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """A fixed synthetic task of the spec's architecture (class templates plus noise)."""
    rng = np.random.default_rng(spec["data_seed"])
    labels = rng.integers(0, CLASSES, SAMPLES)
    shape = {"mlp": (INPUT_FEATURES,), "cnn": (1, IMAGE, IMAGE), "transformer": (SEQ, D_MODEL)}[spec["arch"]]
    centres = rng.normal(0, 1.0, (CLASSES, *shape))
    inputs = centres[labels] + rng.normal(0, spec["noise"], (SAMPLES, *shape))
    return (inputs * spec["input_scale"]).astype(np.float32), labels.astype(np.int32)


def build_net(spec: dict):
    import mindspore as ms
    from mindspore import nn, ops

    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}[spec["activation"]]
    width, depth = spec["width"], spec["depth"]
    if spec["arch"] == "mlp":
        cells, fan_in = [], INPUT_FEATURES
        for _ in range(depth):
            cells += [nn.Dense(fan_in, width), act()]
            fan_in = width
        net = nn.SequentialCell([*cells, nn.Dense(fan_in, CLASSES)])
    elif spec["arch"] == "cnn":
        cells, channels = [], 1
        for _ in range(depth):
            cells += [nn.Conv2d(channels, width, 3, pad_mode="same"), act()]
            channels = width
        net = nn.SequentialCell([*cells, nn.AvgPool2d(2, 2), nn.Flatten(), nn.Dense(channels * 16, CLASSES)])
    else:

        class TinyTransformer(nn.Cell):
            def __init__(self):
                super().__init__()
                layer = nn.TransformerEncoderLayer(D_MODEL, 2, dim_feedforward=width, dropout=0.0,
                                                   activation="gelu" if spec["activation"] == "gelu" else "relu",
                                                   batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, depth)
                self.head = nn.Dense(D_MODEL, CLASSES)

            def construct(self, x):
                return self.head(ops.mean(self.encoder(x), 1))

        net = TinyTransformer()
    if spec["precision"] in ("float16", "loss_scale"):
        net.to_float(ms.float16)
    return net


def build_optimizer(spec: dict, params):
    from mindspore import nn

    lr = spec["lr"]
    if spec["optimizer"] == "sgd":
        return nn.SGD(params, learning_rate=lr)
    if spec["optimizer"] == "momentum":
        return nn.Momentum(params, learning_rate=lr, momentum=0.9)
    if spec["optimizer"] == "adam":
        return nn.Adam(params, learning_rate=lr)
    return nn.AdamWeightDecay(params, learning_rate=lr, weight_decay=0.01)


class Recorder:
    """Every step's raw loss, global gradient norm, rate and wall time."""

    def __init__(self, total: int):
        self.loss = np.full(total, np.nan)
        self.grad_norm = np.full(total, np.nan)
        self.lr = np.full(total, np.nan)
        self.step_time = np.full(total, np.nan)

    def save(self, path: Path) -> None:
        np.savez(path, loss=self.loss, grad_norm=self.grad_norm, lr=self.lr, step_time=self.step_time)


def batches(spec: dict):
    """The step-by-step minibatches, with the injected corrupted batches."""
    inputs, labels = dataset(spec)
    rng = np.random.default_rng(spec["seed"])
    corrupt = set(spec.get("corrupt_steps", []))
    for step in range(spec["steps"]):
        index = rng.integers(0, SAMPLES, spec["batch"])
        x, y = inputs[index], labels[index]
        if step in corrupt:  # a corrupted shard: shuffled inputs at a large scale, random labels
            x = (rng.permutation(x.ravel()).reshape(x.shape) * spec["corrupt_scale"]).astype(np.float32)
            y = rng.integers(0, CLASSES, spec["batch"]).astype(np.int32)
        yield x, y


def custom_loop(spec: dict, logs: Path, record: Recorder) -> None:
    """A `value_and_grad` loop compiled with `ms.jit`; logs through the spec's logging path."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops

    from trainer_hooks import grad_norm_stats

    net = build_net(spec)
    optimizer = build_optimizer(spec, net.trainable_params())
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    scale = float(spec.get("loss_scale", 1.0))

    def forward(x, y):
        return ops.cast(loss_fn(net(x), y), ms.float32) * scale

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        scaled, grads = grad_fn(x, y)
        grads = tuple(ops.cast(g, ms.float32) / scale for g in grads)
        stats = grad_norm_stats(grads)
        optimizer(grads)
        return scaled / scale, stats

    log = make_logger(spec, logs, net)
    for step, (x, y) in enumerate(batches(spec)):
        rate = lr_at(spec, step)
        ops.assign(optimizer.learning_rate, Tensor(rate, ms.float32))
        started = time.perf_counter()
        loss, stats = train_step(Tensor(x), Tensor(y))
        loss, stats = float(loss.asnumpy()), stats.asnumpy()
        record.step_time[step] = time.perf_counter() - started
        record.loss[step], record.grad_norm[step], record.lr[step] = loss, float(stats[0]), rate
        log(step + 1, loss, stats, rate, spec["batch"])
    log(None, None, None, None, None)


def make_logger(spec: dict, logs: Path, net):
    """A function `(step, loss, grad stats, lr, batch)` writing this spec's logs; `step=None` closes."""
    every = spec["log_every"]
    path = spec["logging"]
    if path == "hooks_logger":
        from trainer_hooks import HealthLogger

        health = HealthLogger(str(logs), collect_freq=every, parameters=net, batch_size=spec["batch"],
                              online_analysis=False, histogram_freq=0, flush_secs=3600)

        def log(step, loss, stats, rate, batch):
            if step is None:
                health.close()
            else:
                health.log_step(step, loss, grad_stats=stats, lr=rate)

        return log
    if path == "mindformers":
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(str(logs / "rank_0"), flush_secs=3600)

        def log(step, loss, stats, rate, batch):
            if step is None:
                writer.close()
            elif step % every == 0:
                writer.add_scalar("loss", loss, step)
                writer.add_scalar("loss vs samples", loss, step * batch)
                writer.add_scalar("learning-rate", rate, step)
                writer.add_scalar("global_norm", float(stats[0]), step)

        return log
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(logs), max_queue_size=4096, flush_secs=3600)
    window: list[float] = []

    def scalars(step, values):
        writer.add_event(Event(step=step, wall_time=time.time(), summary=Summary(
            value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])))

    def log(step, loss, stats, rate, batch):
        if step is None:
            writer.close()
            return
        window.append(loss)
        if step % every:
            return
        if path == "hf":  # the Trainer logs the mean of the losses since its previous log
            scalars(step, {"train/loss": float(np.mean(window)), "train/learning_rate": rate,
                           "train/grad_norm": float(stats[0])})
        else:
            scalars(step, {"loss": loss, "lr": rate})
        window.clear()

    return log


def model_train(spec: dict, logs: Path, record: Recorder) -> None:
    """`Model.train` on a training cell that also stores each step's global gradient norm."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import Parameter, Tensor, nn, ops
    from mindspore.train import Callback, Model, SummaryCollector

    from trainer_hooks import HealthMonitor, grad_norm_stats

    net = build_net(spec)
    optimizer = build_optimizer(spec, net.trainable_params())
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    class TrainOneStepWithNorm(nn.TrainOneStepCell):
        def __init__(self, network, opt):
            super().__init__(network, opt)
            self.last_grad_norm = Parameter(Tensor(0.0, ms.float32), name="zoo_last_grad_norm", requires_grad=False)

        def construct(self, *inputs):
            loss = self.network(*inputs)
            sens = ops.fill(loss.dtype, loss.shape, 1.0)
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            grads = self.grad_reducer(grads)
            stats = grad_norm_stats(tuple(ops.cast(g, ms.float32) for g in grads))
            loss = ops.depend(loss, ops.assign(self.last_grad_norm, stats[0]))
            loss = ops.depend(loss, self.optimizer(grads))
            return ops.cast(loss, ms.float32)

    cell = TrainOneStepWithNorm(nn.WithLossCell(net, loss_fn), optimizer)
    data = list(batches(spec))
    source = ds.GeneratorDataset(data, column_names=["x", "y"], shuffle=False)

    class Record(Callback):
        def __init__(self):
            self.started = time.perf_counter()

        def on_train_step_begin(self, run_context):
            step = run_context.original_args().cur_step_num - 1
            ops.assign(optimizer.learning_rate, Tensor(lr_at(spec, step), ms.float32))
            self.started = time.perf_counter()

        def on_train_step_end(self, run_context):
            params = run_context.original_args()
            step = params.cur_step_num - 1
            record.loss[step] = float(params.net_outputs.asnumpy())
            record.step_time[step] = time.perf_counter() - self.started
            record.grad_norm[step] = float(cell.last_grad_norm.asnumpy())
            record.lr[step] = lr_at(spec, step)

    if spec["logging"] == "summary_collector":
        logger = SummaryCollector(str(logs), collect_freq=spec["log_every"], keep_default_action=False,
                                  collect_specified_data={"collect_metric": True, "collect_graph": False,
                                                          "collect_dataset_graph": False})
    else:
        logger = HealthMonitor(str(logs), collect_freq=spec["log_every"], online_analysis=False,
                               histogram_freq=0, flush_secs=3600)
    Model(cell).train(1, source, callbacks=[Record(), logger], dataset_sink_mode=False)


def train(spec: dict, out: Path) -> None:
    import mindspore as ms

    ms.set_seed(spec["seed"])
    logs = out / f"{spec['name']}.logs"
    logs.mkdir(parents=True, exist_ok=True)
    record = Recorder(spec["steps"])
    if spec["logging"] in ("hooks_monitor", "summary_collector"):
        model_train(spec, logs, record)
    else:
        custom_loop(spec, logs, record)
    record.save(out / f"{spec['name']}.npz")


def main(argv: list[str]) -> int:
    import mindspore as ms

    specs = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    with tempfile.TemporaryDirectory(prefix="tbh-zoo-") as scratch:
        os.chdir(scratch)
        for spec in specs:
            started = time.perf_counter()
            train(spec, out)
            print(f"trained {spec['name']} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
