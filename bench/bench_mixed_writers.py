"""Reading and checking speed on a logdir of mixed writers, side by side in one run.

    PYTHONPATH=. python bench/bench_mixed_writers.py [--steps 2000] [--repeats 3] [--logdir DIR] [--skip-losslint]
                                                     [--baseline TREE]

The logdir holds 80 runs of four scalar tags (loss, learning rate, gradient norm, accuracy),
`--steps` steps each, one value per event, each run in the layout of one writer:

- `legacy`: `simple_value` (tensorboardX, torch's default `add_scalar`, MindFormers, TF1) - 35 runs;
- `tf2`: float32 `tensor_content`, shape [], the scalars plugin's metadata on each tag's first event
  only (TF2's `tf.summary.scalar`, so Keras and the JAX/Flax metric writers) - 15 runs;
- `torch_new_style`: `float_val`, no shape, metadata on every event (torch's
  `add_scalar(new_style=True)`) - 15 runs;
- `summary_v2`: TensorBoard's own `summary_v2.scalar_pb` (float_val, shape [], metadata with a
  description on every event) - 15 runs.

Events go through TensorBoard's `EventFileWriter`; the logdir is generated once and reused. For
each writer's runs and for the whole logdir, four readings are timed on the wall clock:
`tb-health check` and `losslint check` as the console commands a user types (fresh processes;
tb-health three times around losslint, median quoted), TensorBoard's Python `EventFileLoader`
merely iterating the events (in this process), and tb-health's `LogdirReader` alone (in this
process, median of `--repeats`). The machine's load average is printed before and after.

With `--baseline TREE` (another checkout of the package, e.g. the previous commit's) its
`tb-health check` is timed too, each of its three runs right after one of ours, and shown in a
second table beside ours. Each check also reports its CPU time (user + system), which a busy
machine inflates less than the wall clock.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata  # noqa: E402
from tensorboard.compat.proto.tensor_pb2 import TensorProto  # noqa: E402
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto  # noqa: E402
from tensorboard.plugins.scalar import summary_v2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

from bench.bench_check_speed import wall_seconds  # noqa: E402
from bench.event_records import needs_generating  # noqa: E402
from tb_health_plugin.readers import LogdirReader  # noqa: E402

DEFAULT_LOGDIR = Path("/tmp/tb-health-mixed-writers-logdir")
TAGS = ("train/loss", "train/lr", "train/grad_norm", "eval/accuracy")
DT_FLOAT = 1


def _scalars_metadata() -> SummaryMetadata:
    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))


def legacy_value(tag: str, number: float, first: bool) -> Summary.Value:
    return Summary.Value(tag=tag, simple_value=number)


def tf2_value(tag: str, number: float, first: bool) -> Summary.Value:
    """As TF2's C++ summary writer serialises `tf.summary.scalar` (`Tensor::AsProtoTensorContent`)."""
    tensor = TensorProto(dtype=DT_FLOAT, tensor_shape=TensorShapeProto(),
                         tensor_content=np.float32(number).tobytes())
    value = Summary.Value(tag=tag, tensor=tensor)
    if first:
        value.metadata.CopyFrom(_scalars_metadata())
    return value


def torch_value(tag: str, number: float, first: bool) -> Summary.Value:
    """As torch.utils.tensorboard.summary.scalar(..., new_style=True) builds it."""
    tensor = TensorProto(float_val=[number], dtype=DT_FLOAT)
    return Summary.Value(tag=tag, tensor=tensor, metadata=_scalars_metadata())


def summary_v2_value(tag: str, number: float, first: bool) -> Summary.Value:
    (value,) = summary_v2.scalar_pb(tag, np.float32(number), description="logged by the training loop").value
    return value


WRITERS = {  # name: (runs, value builder)
    "legacy": (35, legacy_value),
    "tf2": (15, tf2_value),
    "torch_new_style": (15, torch_value),
    "summary_v2": (15, summary_v2_value),
}


def curves(seed: int, steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.arange(1, steps + 1)
    loss = np.exp(np.log(1.5 + 8.0 * (1 + x / 2000.0) ** -0.6) + 0.03 * rng.standard_normal(steps))
    lr = 3e-4 * np.minimum(1.0, x / 500.0) * (0.55 + 0.45 * np.cos(np.pi * x / steps))
    grad = np.exp(0.3 * rng.standard_normal(steps))
    accuracy = 1 - loss / loss.max() * 0.5
    return dict(zip(TAGS, (loss, lr, grad, accuracy), strict=True))


def generate(logdir: Path, steps: int) -> None:
    marker = logdir / f".complete-{steps}"
    if not needs_generating(logdir, marker):
        return
    started = time.perf_counter()
    index = 0
    for writer_name, (runs, build) in WRITERS.items():
        for run in range(runs):
            folder = logdir / writer_name / f"run_{run:02d}"
            folder.mkdir(parents=True)
            writer = EventFileWriter(str(folder), max_queue_size=4096, flush_secs=3600)
            series = {tag: values.tolist() for tag, values in curves(index, steps).items()}
            for step in range(steps):
                for tag in TAGS:
                    summary = Summary(value=[build(tag, series[tag][step], step == 0)])
                    writer.add_event(Event(step=step * 10, wall_time=1.7e9 + step * 0.5, summary=summary))
            writer.close()
            index += 1
            print(f"\rgenerating {index}/{sum(r for r, _ in WRITERS.values())} runs", end="", file=sys.stderr, flush=True)
    marker.touch()
    print(f"\ngenerated in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def event_files(folder: Path) -> list[str]:
    return sorted(glob.glob(str(folder / "**" / "*tfevents*"), recursive=True))


def eventfileloader_seconds(folder: Path) -> tuple[float, int]:
    """TensorBoard's Python loader merely iterating every event (what its `--load_fast=false` reads with)."""
    started = time.perf_counter()
    count = 0
    for path in event_files(folder):
        for _event in EventFileLoader(path).Load():
            count += 1
    return time.perf_counter() - started, count


def reader_seconds(folder: Path) -> float:
    started = time.perf_counter()
    reader = LogdirReader(folder, formats=("tfevents",))
    reader.refresh()
    points = sum(len(series) for name in reader.run_names() for series in reader.run(name).scalars.values())
    assert points > 0
    return time.perf_counter() - started


def check_seconds(tree: Path, folder: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of `tb-health check` with `tree`'s package, run from
    `tree` (`python -m` puts the working directory first on the path)."""
    command = [sys.executable, "-m", "tb_health_plugin.cli", "check", str(folder), "--format", "json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=tree,
                   env={"PYTHONPATH": str(tree), "PATH": str(Path(sys.executable).parent)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure(folder: Path, repeats: int, losslint: bool, baseline: Path | None) -> dict[str, float]:
    python = sys.executable
    theirs = [str(Path(python).parent / "losslint"), "check", str(folder), "--format", "json"]
    trees = {"check": ROOT} | ({"baseline": baseline} if baseline else {})
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    figures = {}
    for attempt in range(3):
        for name, tree in trees.items():
            runs[name].append(check_seconds(tree, folder))
        if attempt == 0 and losslint:
            figures["losslint"] = wall_seconds(theirs)[0]
    for name, timings in runs.items():
        figures[name] = statistics.median(wall for wall, _ in timings)
        figures[f"{name}_cpu"] = statistics.median(cpu for _, cpu in timings)
    figures["loader"], figures["events"] = eventfileloader_seconds(folder)
    figures["reader"] = statistics.median(reader_seconds(folder) for _ in range(repeats))
    figures["megabytes"] = sum(os.path.getsize(p) for p in event_files(folder)) / 1e6
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run (four tags each)")
    parser.add_argument("--repeats", type=int, default=3, help="readings of our reader alone (median)")
    parser.add_argument("--logdir", type=Path, default=DEFAULT_LOGDIR)
    parser.add_argument("--skip-losslint", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout of the package whose check is timed too")
    args = parser.parse_args()
    baseline = args.baseline.resolve() if args.baseline else None
    generate(args.logdir, args.steps)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    rows = {name: measure(args.logdir / name, args.repeats, not args.skip_losslint, baseline) for name in WRITERS}
    rows["all"] = measure(args.logdir, args.repeats, not args.skip_losslint, baseline)
    print(f"machine: load average {os.getloadavg()[0]:.1f} at the end\n")
    print(f"logdir {args.logdir}: {sum(r for r, _ in WRITERS.values())} runs, 4 tags x {args.steps} steps each\n")
    print_table(rows, "check", f"this tree ({ROOT})")
    if baseline:
        print()
        print_table(rows, "baseline", f"baseline ({baseline})")
    print("\ncheck: `tb-health check --format json` (fresh process, median of 3: wall clock, and CPU in brackets);"
          "\nlosslint: `losslint check --format json`; EventFileLoader: TensorBoard's Python loader iterating the"
          "\nevents; reader: tb-health's LogdirReader alone. x: how many times faster tb-health is (targets: check"
          "\n20x losslint and 10x EventFileLoader; reader 20x).")
    return 0


def print_table(rows: dict[str, dict[str, float]], check: str, title: str) -> None:
    print(title)
    header = (f"{'writer':16s} {'runs':>4s} {'events':>9s} {'MB':>6s} | {'check (cpu)':>15s} {'losslint':>9s} {'x':>6s} | "
              f"{'EventFileLoader':>15s} {'check x':>7s} | {'reader':>7s} {'reader x':>8s}")
    print(header)
    print("-" * len(header))
    for name, row in rows.items():
        runs = WRITERS[name][0] if name in WRITERS else sum(r for r, _ in WRITERS.values())
        seconds = row[check]
        losslint = f"{row['losslint']:8.2f}s {row['losslint'] / seconds:5.1f}x" if "losslint" in row else f"{'-':>9s} {'-':>6s}"
        print(f"{name:16s} {runs:4d} {row['events']:9,d} {row['megabytes']:6.1f} | {seconds:6.2f}s ({row[check + '_cpu']:5.2f}s) "
              f"{losslint} | {row['loader']:14.2f}s {row['loader'] / seconds:6.1f}x | {row['reader']:6.2f}s "
              f"{row['loader'] / row['reader']:7.1f}x")


if __name__ == "__main__":
    sys.exit(main())
