"""Step time of a small Transformer trained on the CPU (graph mode) with and without the hooks.

Configurations, run side by side in many short interleaved rounds (the machine is shared and
noisy; the order rotates each round). Each configuration is compiled and run once with its
callbacks before timing. A clock callback, first in the list, times the steps between the
second and the last step end of a round, so per-run costs (compilation, dataset start, the
monitor's start and final analysis) stay out and every callback's per-step work stays in.
  baseline        nn.TrainOneStepCell, no callback
  monitor-only    plain training cell + HealthMonitor(log_dir)               (no gradient norms)
  hooks-default   TrainOneStepWithHealth + HealthMonitor(log_dir)             (the documented setup)
  summary         nn.TrainOneStepCell + MindSpore SummaryCollector(collect_freq=10), its default
                  collection (loss, weight histograms, lineage) minus the dataset graph
Prints the median and minimum step time of each over the rounds, and the median over rounds of
the ratio to the baseline's time in the same round (paired, robust to load drifting).

    PYTHONPATH=. python bench/bench_hook_overhead.py [--steps 25] [--rounds 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

VOCAB, SEQ, BATCH, D_MODEL, HEADS, FFN, LAYERS = 512, 64, 8, 128, 4, 256, 2


def build_net():
    import mindspore as ms
    from mindspore import nn, ops

    class TinyLM(nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D_MODEL)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True), LAYERS
            )
            self.head = nn.Dense(D_MODEL, VOCAB)
            self.loss = nn.CrossEntropyLoss()

        def construct(self, tokens, labels):
            logits = self.head(self.encoder(self.embed(tokens)))
            return self.loss(ops.reshape(logits, (-1, VOCAB)), ops.reshape(labels, (-1,)))

    ms.set_seed(0)
    return TinyLM()


def dataset(steps: int):
    from mindspore import dataset as ds

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, size=(steps * BATCH, SEQ + 1)).astype(np.int32)
    return ds.NumpySlicesDataset({"tokens": tokens[:, :-1], "labels": tokens[:, 1:]}, shuffle=False).batch(BATCH)


def make_run(config: str, workdir: str):
    """A model and its callbacks for one configuration."""
    import mindspore as ms
    from mindspore import nn

    from trainer_hooks import HealthMonitor, TrainOneStepWithHealth

    net = build_net()
    optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3)
    log_dir = tempfile.mkdtemp(prefix=f"{config}-", dir=workdir)
    if config == "hooks-default":
        cell = TrainOneStepWithHealth(net, optimizer)
    else:
        cell = nn.TrainOneStepCell(net, optimizer)
    callbacks = []
    if config in ("hooks-default", "monitor-only"):
        callbacks = [HealthMonitor(log_dir, seq_length=SEQ)]
    elif config == "summary":
        # default collection except the dataset graph, which fails with this protobuf version
        callbacks = [ms.SummaryCollector(log_dir, collect_freq=10, collect_specified_data={"collect_dataset_graph": False})]
    return ms.Model(cell), callbacks


def time_steps(model, callbacks, steps: int) -> float:
    """Seconds per step from the 2nd to the last step end, callbacks' per-step work included."""
    from mindspore.train.callback import Callback

    class StepClock(Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_step_end(self, run_context):
            self.ends.append(time.perf_counter())

    clock = StepClock()
    model.train(1, dataset(steps), callbacks=[clock, *callbacks], dataset_sink_mode=False)
    return (clock.ends[-1] - clock.ends[1]) / (len(clock.ends) - 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25, help="steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()

    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    configs = ["baseline", "monitor-only", "hooks-default", "summary"]
    workdir = tempfile.mkdtemp(prefix="bench-hooks-")
    os.chdir(workdir)  # MindSpore writes rank_0/ and kernel folders into the cwd
    runs = {}
    for config in configs:
        model, callbacks = make_run(config, workdir)
        time_steps(model, callbacks, 5)  # compile, first imports, writer start
        runs[config] = (model, callbacks)
    times: dict[str, list[float]] = {c: [] for c in configs}
    for round_index in range(args.rounds):
        shift = round_index % len(configs)
        for config in configs[shift:] + configs[:shift]:
            model, callbacks = runs[config]
            times[config].append(time_steps(model, callbacks, args.steps))
    for _, callbacks in runs.values():
        for callback in callbacks:
            if hasattr(callback, "_close_quietly"):
                callback._close_quietly()
    base_min = min(times["baseline"])
    print(
        f"small Transformer LM ({LAYERS} layers, d={D_MODEL}, seq={SEQ}, batch={BATCH}), CPU graph mode, "
        f"{args.steps} steps x {args.rounds} interleaved rounds"
    )
    print(f"{'configuration':<16}{'median ms/step':>16}{'min ms/step':>13}{'paired ratio':>14}{'min ratio':>11}")
    for config in configs:
        median, fastest = statistics.median(times[config]), min(times[config])
        paired = statistics.median(t / b for t, b in zip(times[config], times["baseline"], strict=True))
        print(f"{config:<16}{median * 1000:>16.2f}{fastest * 1000:>13.2f}{paired:>13.3f}x{fastest / base_min:>10.3f}x")


if __name__ == "__main__":
    main()
