"""Step time of small Transformers trained on the CPU (graph mode) with and without the hooks.

Why each round is a fresh process with the build order rotated: in one process, the model built
first runs its steps faster than identical models built after it (four plain
`nn.TrainOneStepCell`s of the tiny model, built in turn and timed interleaved over 12 rounds: the
second to fourth took 1.035x, 1.048x and 1.041x the first's time). The earlier version of this
benchmark always built the baseline first, so that bias counted as hook overhead. Now every round
runs in its own interpreter (`--worker`), builds the configurations in that round's order (the
order rotates, so each configuration is built first equally often), compiles and warms each up,
then times each `--repeats` times, interleaved, each timing a training of `--steps` steps
(default 110: `Model.train` numbers every call's steps from 1, so a timing must pass step 100 to
include the hooks' default weight reads at steps 49-50 and 99-100 and the histograms at step
100; 25-step timings, as before, left them out). The paired ratio of a round compares the
configurations within one process. A clock callback, first in the list, times the steps between
the second and the last step end of each timing, so per-run costs (compilation, dataset start,
the monitor's start and final analysis) stay out and every callback's per-step work stays in.
  baseline        nn.TrainOneStepCell, no callback
  monitor-only    plain training cell + HealthMonitor(log_dir)               (no gradient norms)
  hooks-default   TrainOneStepWithHealth + HealthMonitor(log_dir)             (the documented setup)
  summary         nn.TrainOneStepCell + MindSpore SummaryCollector(collect_freq=10), its default
                  collection (loss, weight histograms, lineage) minus the dataset graph
  cell-only       TrainOneStepWithHealth, no callback                        (the in-step norms alone)
  no-weights      the documented setup with weight_freq=0, histogram_freq=0
  no-online       the documented setup with online_analysis=False
  no-weights-online  both of the last two off
  hooks-before    (with `--before REV`) the documented setup with the hooks of git revision REV,
                  copied into a temporary package, for a before/after comparison in one process
Prints the median and minimum step time of each over the rounds, the median over rounds of the
ratio to the baseline's time in the same round with its interquartile range, and the geometric
mean of those ratios with its 95% confidence interval (Student t on the log ratios: rounds are
independent processes); the same for the process's CPU time per step (all threads), which a
shared machine's load disturbs less than wall time. With `--before`, also the geometric mean of
the two versions' per-round ratio, which the baseline's own noise does not widen.

Two model sizes (`--model`): the in-step gradient norms cost a fixed few tens of microseconds
per parameter tensor on the CPU (one kernel launch each), so their share is largest on the
tiniest model and falls as the work per step grows.
  tiny    2 layers, d=128, seq 64, batch 8     (about 30-40 ms a step here)
  small   4 layers, d=256, seq 128, batch 16   (about 25x the tiny one's step time here, 51 tensors vs 27)

    PYTHONPATH=. python bench/bench_hook_overhead.py [--model tiny|small|both] [--steps 110] [--rounds 12]
        [--repeats 2] [--before REV] [--configs baseline,hooks-default,...]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelSize:
    layers: int
    d_model: int
    heads: int
    ffn: int
    seq: int
    batch: int
    vocab: int = 512

    def describe(self) -> str:
        return f"{self.layers} layers, d={self.d_model}, seq={self.seq}, batch={self.batch}"


SIZES = {
    "tiny": ModelSize(layers=2, d_model=128, heads=4, ffn=256, seq=64, batch=8),
    "small": ModelSize(layers=4, d_model=256, heads=4, ffn=1024, seq=128, batch=16),
}


def build_net(size: ModelSize):
    import mindspore as ms
    from mindspore import nn, ops

    class TinyLM(nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(size.vocab, size.d_model)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(size.d_model, size.heads, size.ffn, dropout=0.0, batch_first=True),
                size.layers,
            )
            self.head = nn.Dense(size.d_model, size.vocab)
            self.loss = nn.CrossEntropyLoss()
            self.vocab = size.vocab

        def construct(self, tokens, labels):
            logits = self.head(self.encoder(self.embed(tokens)))
            return self.loss(ops.reshape(logits, (-1, self.vocab)), ops.reshape(labels, (-1,)))

    ms.set_seed(0)
    return TinyLM()


def dataset(size: ModelSize, steps: int):
    from mindspore import dataset as ds

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, size.vocab, size=(steps * size.batch, size.seq + 1)).astype(np.int32)
    return ds.NumpySlicesDataset({"tokens": tokens[:, :-1], "labels": tokens[:, 1:]}, shuffle=False).batch(size.batch)


BEFORE_PACKAGE = "trainer_hooks_before"


def install_before(revision: str, workdir: str) -> None:
    """`trainer_hooks` of git `revision` importable as `trainer_hooks_before` (imports renamed)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", revision, "trainer_hooks/"], cwd=repo, check=True,
        capture_output=True, text=True,
    ).stdout.split()
    for name in names:
        if not name.endswith(".py"):
            continue
        source = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=repo, check=True, capture_output=True, text=True).stdout
        target = os.path.join(workdir, BEFORE_PACKAGE + name.removeprefix("trainer_hooks"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as file:
            file.write(re.sub(r"\btrainer_hooks\b", BEFORE_PACKAGE, source))
    sys.path.insert(0, workdir)


def make_run(config: str, size: ModelSize, workdir: str):
    """A model and its callbacks for one configuration."""
    import mindspore as ms
    from mindspore import nn

    hooks = importlib.import_module(BEFORE_PACKAGE if config == "hooks-before" else "trainer_hooks")
    net = build_net(size)
    optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3)
    log_dir = tempfile.mkdtemp(prefix=f"{config}-", dir=workdir)
    if config in ("hooks-default", "hooks-before", "cell-only", *PARTS):
        cell = hooks.TrainOneStepWithHealth(net, optimizer)
    else:
        cell = nn.TrainOneStepCell(net, optimizer)
    callbacks = []
    if config in ("hooks-default", "hooks-before", "monitor-only", *PARTS):
        callbacks = [hooks.HealthMonitor(log_dir, seq_length=size.seq, **PARTS.get(config, {}))]
    elif config == "summary":
        # default collection except the dataset graph, which fails with this protobuf version
        callbacks = [ms.SummaryCollector(log_dir, collect_freq=10, collect_specified_data={"collect_dataset_graph": False})]
    return ms.Model(cell), callbacks


def time_steps(model, callbacks, size: ModelSize, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds per step from the 2nd to the last step end, callbacks' per-step work
    included."""
    from mindspore.train.callback import Callback

    class StepClock(Callback):
        def __init__(self):
            super().__init__()
            self.ends = []
            self.cpu = []

        def on_train_step_end(self, run_context):
            self.ends.append(time.perf_counter())
            self.cpu.append(time.process_time())

    clock = StepClock()
    model.train(1, dataset(size, steps), callbacks=[clock, *callbacks], dataset_sink_mode=False)
    timed = len(clock.ends) - 2
    return (clock.ends[-1] - clock.ends[1]) / timed, (clock.cpu[-1] - clock.cpu[1]) / timed


# The documented setup with one part of the hooks' work turned off: where its cost goes.
PARTS = {
    "no-weights": {"weight_freq": 0, "histogram_freq": 0},
    "no-online": {"online_analysis": False},
    "no-weights-online": {"weight_freq": 0, "histogram_freq": 0, "online_analysis": False},
}
CONFIGS = ("baseline", "monitor-only", "hooks-default", "hooks-before", "summary", "cell-only", *PARTS)
DEFAULT_CONFIGS = ("baseline", "monitor-only", "hooks-default", "summary")


def rotated(items: list[str], turn: int) -> list[str]:
    """`items` rotated by `turn` places: over len(items) turns each comes first once."""
    shift = turn % len(items)
    return items[shift:] + items[:shift]


def measure_round(size: ModelSize, steps: int, repeats: int, workdir: str, configs: list[str]) -> dict:
    """One round in this process: build the configurations in the given order, warm each up, then
    time each `repeats` times, interleaved. Median wall and CPU seconds per step of each."""
    runs = {}
    for config in configs:
        model, callbacks = make_run(config, size, workdir)
        time_steps(model, callbacks, size, 5)  # compile (both graphs of the lean cell), imports, writer start
        runs[config] = (model, callbacks)
    timings: dict[str, list[tuple[float, float]]] = {c: [] for c in configs}
    for repeat in range(repeats):
        for config in rotated(configs, repeat):
            timings[config].append(time_steps(*runs[config], size, steps))
    for _, callbacks in runs.values():
        for callback in callbacks:
            if hasattr(callback, "_close_quietly"):
                callback._close_quietly()
    return {c: [statistics.median(t[0] for t in timings[c]), statistics.median(t[1] for t in timings[c])]
            for c in configs}


def measure(name: str, args, configs: list[str]) -> tuple[dict, dict]:
    """Wall and CPU seconds per step of every configuration, one fresh process per round, the build
    order rotating (module docstring)."""
    times: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    for round_index in range(args.rounds):
        order = rotated(configs, round_index)
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--model", name, "--steps", str(args.steps),
                   "--repeats", str(args.repeats), "--configs", ",".join(order)]
        if args.before:
            command += ["--before", args.before]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"round {round_index + 1} failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for config in configs:
            times[config].append(result[config][0])
            cpu[config].append(result[config][1])
        print(f"  round {round_index + 1}/{args.rounds} ({', '.join(order)}): "
              + ", ".join(f"{c} {result[c][0] * 1000:.1f} ms" for c in configs), file=sys.stderr, flush=True)
    return times, cpu


def geometric_interval(values: list[float], base: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the per-round ratios and its 95% interval (Student t on the log ratios)."""
    from scipy import stats

    logs = np.log(np.asarray(values) / np.asarray(base))
    mean = float(logs.mean())
    if len(logs) < 2:
        return float(np.exp(mean)), float("nan"), float("nan")
    half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


def paired(values: list[float], base: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of the per-round ratios to the baseline."""
    ratios = sorted(t / b for t, b in zip(values, base, strict=True))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return quartiles[1], quartiles[0], quartiles[2]


def report(name: str, size: ModelSize, times: dict, cpu: dict, steps: int, rounds: int, repeats: int) -> None:
    base_min = min(times["baseline"])
    print(f"\n{name} Transformer LM ({size.describe()}), CPU graph mode, {rounds} rounds (a fresh process each) "
          f"x {repeats} timings of {steps} steps")
    print(f"{'configuration':<16}{'median ms/step':>16}{'min ms/step':>13}{'paired ratio [IQR]':>28}"
          f"{'geo. mean [95% CI]':>28}{'CPU ms/step':>13}{'paired CPU ratio [IQR]':>28}{'CPU geo. mean [95% CI]':>28}")
    for config, values in times.items():
        median, fastest = statistics.median(values), min(values)
        ratio, low, high = paired(values, times["baseline"])
        mean, mean_low, mean_high = geometric_interval(values, times["baseline"])
        cpu_ratio, cpu_low, cpu_high = paired(cpu[config], cpu["baseline"])
        cpu_mean, cpu_mean_low, cpu_mean_high = geometric_interval(cpu[config], cpu["baseline"])
        print(f"{config:<16}{median * 1000:>16.2f}{fastest * 1000:>13.2f}"
              f"{ratio:>12.3f}x [{low:.3f}, {high:.3f}]{mean:>12.3f}x [{mean_low:.3f}, {mean_high:.3f}]"
              f"{statistics.median(cpu[config]) * 1000:>13.2f}{cpu_ratio:>12.3f}x [{cpu_low:.3f}, {cpu_high:.3f}]"
              f"{cpu_mean:>12.3f}x [{cpu_mean_low:.3f}, {cpu_mean_high:.3f}]")
    print(f"(fastest baseline step {base_min * 1000:.2f} ms)")
    if "hooks-before" in times and "hooks-default" in times:  # the two versions side by side, per round
        wall = geometric_interval(times["hooks-default"], times["hooks-before"])
        cpu_time = geometric_interval(cpu["hooks-default"], cpu["hooks-before"])
        print(f"hooks-default / hooks-before, geometric mean of the per-round ratios [95% CI]: wall "
              f"{wall[0]:.3f} [{wall[1]:.3f}, {wall[2]:.3f}], CPU {cpu_time[0]:.3f} [{cpu_time[1]:.3f}, {cpu_time[2]:.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=(*SIZES, "both"), default="both")
    parser.add_argument("--steps", type=int, default=110, help="steps per timing (past step 100: module docstring)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds, each a fresh process")
    parser.add_argument("--repeats", type=int, default=2, help="timings of each configuration per round")
    parser.add_argument("--before", metavar="REV", help="also time the hooks of this git revision")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help="comma-separated configurations (baseline always included)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one round, JSON out
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    configs = ["baseline", *(c for c in args.configs.split(",") if c in CONFIGS and c != "baseline")]
    if args.before and "hooks-before" not in configs:
        configs.append("hooks-before")
    if "hooks-before" in configs and not args.before:
        parser.error("hooks-before needs --before REV")
    for name in SIZES if args.model == "both" else (args.model,):
        times, cpu = measure(name, args, configs)
        report(name, SIZES[name], times, cpu, args.steps, args.rounds, args.repeats)


def run_worker(args) -> None:
    """One round (`--worker`): the configurations in the order given, JSON of their times on the
    last line of stdout."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    workdir = tempfile.mkdtemp(prefix="bench-hooks-")
    configs = args.configs.split(",")
    if "hooks-before" in configs:
        install_before(args.before, workdir)
    os.chdir(workdir)  # MindSpore writes rank_0/ and kernel folders into the cwd
    try:
        result = measure_round(SIZES[args.model], args.steps, args.repeats, workdir, configs)
    finally:
        os.chdir(os.path.dirname(workdir))
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
