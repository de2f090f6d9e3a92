"""Read speed of `tb_health_plugin.readers` against TensorBoard's own Python loader, side by side.

    PYTHONPATH=. python bench/bench_readers.py [--scalar-events 300000] [--repeats 3]

Writes a logdir with TensorBoard's `EventFileWriter` (scalar runs, one mixed run with
tensorboardX histograms and text) and a MindSpore-format run, then reads the tfevents runs with
both readers in the same process, alternating (the machine is shared and noisy): the figure to
quote is the ratio. Also reports the cost of an incremental refresh after a 1% append and the
memory of a 1M-point series. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import ScalarEvent
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.readers.accumulate import ScalarBuilder
from tb_health_plugin.readers.schema import PROTOBUF_BACKEND, MsEvent
from tb_health_plugin.tfrecord import masked_crc

SCALAR_TAGS = ("train/loss", "train/lr", "train/grad_norm", "train/loss_scale", "train/step_time_ms")


def write_scalar_run(folder: Path, events: int, first_step: int = 0) -> None:
    writer = EventFileWriter(str(folder), max_queue_size=10_000)
    rng = np.random.default_rng(len(str(folder)))
    values = rng.normal(size=events).astype(np.float32)
    for i in range(events):
        tag = SCALAR_TAGS[i % len(SCALAR_TAGS)]
        step = first_step + i // len(SCALAR_TAGS)
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(values[i]))])
        writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=summary))
    writer.close()


def write_mixed_run(folder: Path, steps: int) -> None:
    import tensorboardX

    writer = tensorboardX.SummaryWriter(str(folder))
    rng = np.random.default_rng(1)
    for step in range(steps):
        writer.add_scalar("loss", float(rng.normal()), step)
        writer.add_scalar("loss_vs_samples", float(rng.normal()), step * 32)
        if step % 10 == 0:
            writer.add_histogram("weight/fc", rng.normal(size=1000), step)
            writer.add_text("note", f"step {step}", step)
    writer.close()


def frame(payload: bytes) -> bytes:
    header = len(payload).to_bytes(8, "little")
    return header + masked_crc(header).to_bytes(4, "little") + payload + masked_crc(payload).to_bytes(4, "little")


def write_mindspore_run(folder: Path, steps: int) -> int:
    """MindSpore-format events as SummaryRecord lays them out: one event per step, all tags in it."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    records = []
    for step in range(1, steps + 1):
        event = MsEvent(wall_time=1.7e9 + step, step=step)
        for tag in ("loss/auto", "lr", "grad_norm"):
            event.summary.value.add(tag=tag).scalar_value = float(rng.normal())
        if step % 10 == 0:
            histogram = event.summary.value.add(tag="weight/auto").histogram
            for left in np.linspace(-1, 1, 30):
                histogram.buckets.add(left=float(left), width=2 / 30, count=int(rng.integers(0, 50)))
        records.append(frame(event.SerializeToString()))
    (folder / f"events.out.events.summary.{int(time.time())}.0.bench_MS").write_bytes(b"".join(records))
    return steps


def tensorboard_read(paths: list[str]) -> int:
    count = 0
    for path in paths:
        for _ in EventFileLoader(path).Load():
            count += 1
    return count


def ours_read(logdir: Path, formats=("tfevents",)) -> LogdirReader:
    reader = LogdirReader(logdir, formats=formats)
    reader.refresh()
    for name in reader.run_names():
        reader.run(name)
    return reader


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def cpu_timed(function, *args):
    """(wall seconds, CPU seconds of this process, result): CPU time suffers less from a busy machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def compare(title: str, paths: list[str], logdir: Path, repeats: int, details: str) -> None:
    """Both readers on the same files, alternating; medians of wall and CPU time."""
    walls: dict[str, list[float]] = {"tb": [], "ours": []}
    cpus: dict[str, list[float]] = {"tb": [], "ours": []}
    events = 0
    for _ in range(repeats):
        wall, cpu, events = cpu_timed(tensorboard_read, paths)
        walls["tb"].append(wall)
        cpus["tb"].append(cpu)
        wall, cpu, _ = cpu_timed(ours_read, logdir)
        walls["ours"].append(wall)
        cpus["ours"].append(cpu)
    wall = {name: statistics.median(times) for name, times in walls.items()}
    cpu = {name: statistics.median(times) for name, times in cpus.items()}
    print(f"\n{title}: {events} events {details} (median of {repeats})")
    for name, label in (("tb", "TensorBoard EventFileLoader"), ("ours", "tb_health readers")):
        print(f"  {label:28s}: wall {wall[name]:7.3f} s {events / wall[name]:>10,.0f} events/s | "
              f"CPU {cpu[name]:7.3f} s {events / cpu[name]:>10,.0f} events/s")
    print(f"  {'ratio':28s}: wall {wall['tb'] / wall['ours']:6.1f}x                      | "
          f"CPU {cpu['tb'] / cpu['ours']:6.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scalar-events", type=int, default=300_000, help="scalar events over 3 runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--series-points", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"protobuf backend: {PROTOBUF_BACKEND}")
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp) / "logdir"
        start = time.perf_counter()
        for rank in range(3):
            write_scalar_run(logdir / f"exp/rank_{rank}", args.scalar_events // 3)
        write_mixed_run(logdir / "mixed", 5000)
        ms_steps = write_mindspore_run(Path(tmp) / "ms" / "run", 50_000)
        print(f"wrote the logdir in {time.perf_counter() - start:.1f} s")
        paths = sorted(glob.glob(str(logdir / "**" / "*tfevents*"), recursive=True))
        size_mb = sum(os.path.getsize(p) for p in paths) / 1e6

        compare("tfevents logdir", paths, logdir, args.repeats, f"{len(paths)} files, {size_mb:.1f} MB")
        mixed = sorted(glob.glob(str(logdir / "mixed" / "*tfevents*")))
        compare("mixed run alone (tensorboardX scalars + 1000-value histograms + text)", mixed, logdir / "mixed",
                args.repeats, "")

        ms_seconds, _ = timed(ours_read, Path(tmp) / "ms", ("mindspore",))
        print(f"\nMindSpore summary run: {ms_steps} events (3 scalars each, a 30-bucket histogram every 10th):"
              f" {ms_steps / ms_seconds:,.0f} events/s ({ms_steps * 3.1 / ms_seconds:,.0f} values/s)")

        reader = ours_read(logdir)
        target = logdir / "exp" / "rank_0"
        append_events = args.scalar_events // 100
        write_scalar_run(target, append_events, first_step=10**7)  # a second file: 1% more events
        incremental, _ = timed(reader.refresh)
        full, _ = timed(ours_read, logdir)
        print(f"\nincremental refresh after a 1% append ({append_events} events): {incremental * 1000:.1f} ms, "
              f"full re-read {full * 1000:.1f} ms ({full / incremental:.0f}x)")
        unchanged = statistics.median(timed(reader.refresh)[0] for _ in range(9))
        print(f"refresh with nothing new: {unchanged * 1000:.2f} ms (median of 9)")

    points = args.series_points
    tracemalloc.start()
    builder = ScalarBuilder("loss")
    for chunk in range(0, points, 50_000):
        steps = np.arange(chunk, min(chunk + 50_000, points), dtype=np.int64)
        builder.extend(steps, steps.astype(np.float64), steps.astype(np.float64))
    ours_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del builder
    tracemalloc.start()
    # What TensorBoard's EventAccumulator keeps per scalar point: a ScalarEvent namedtuple.
    tensorboard_points = [ScalarEvent(float(i), i, float(i)) for i in range(points)]
    theirs_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del tensorboard_points
    print(f"\n{points:,}-point scalar series: ours {ours_bytes / 1e6:.1f} MB (24 B/point used, buffers grow x2), "
          f"as ScalarEvent tuples {theirs_bytes / 1e6:.1f} MB ({theirs_bytes / ours_bytes:.1f}x)")

if __name__ == "__main__":
    main()
