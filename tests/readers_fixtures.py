"""Real event files for the reader tests, written by TensorBoard's and tensorboardX's own writers.

Tensor summaries are built the way TF2's `tf.summary` writes them (a TensorProto plus summary
metadata naming the plugin, on the tag's first value only), without needing TensorFlow.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

WALL_TIME_START = 1_767_000_000.0


def scalar_value(tag: str, value: float) -> Summary.Value:
    return Summary.Value(tag=tag, simple_value=float(value))


def tensor_value(tag: str, array, plugin: str | None) -> Summary.Value:
    value = Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(np.asarray(array)))
    if plugin is not None:
        value.metadata.CopyFrom(SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=plugin)))
    return value


def legacy_histogram_value(tag: str, data: np.ndarray, edges: np.ndarray) -> Summary.Value:
    counts, _ = np.histogram(data, bins=edges)
    histo = HistogramProto(
        min=float(data.min()), max=float(data.max()), num=float(data.size), sum=float(data.sum()),
        sum_squares=float((data**2).sum()), bucket_limit=edges[1:].tolist(), bucket=counts.astype(float).tolist(),
    )
    return Summary.Value(tag=tag, histo=histo)


def event(step: int, *values: Summary.Value, wall_time: float | None = None) -> Event:
    wall = WALL_TIME_START + step if wall_time is None else wall_time
    return Event(wall_time=wall, step=step, summary=Summary(value=list(values)))


def write_events(run_dir: Path, events, suffix: str = "") -> Path:
    """Write events with TensorBoard's EventFileWriter; returns the file written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    before = set(glob.glob(str(run_dir / "*tfevents*")))
    writer = EventFileWriter(str(run_dir), filename_suffix=suffix)
    for item in events:
        writer.add_event(item)
    writer.close()
    (path,) = set(glob.glob(str(run_dir / "*tfevents*"))) - before
    return Path(path)


def write_scalar_run(run_dir: Path, series: dict[str, tuple[list[int], list[float]]], suffix: str = "") -> Path:
    events = [event(step, scalar_value(tag, value)) for tag, (steps, values) in series.items()
              for step, value in zip(steps, values, strict=True)]
    return write_events(run_dir, events, suffix)


def record_offsets(path: Path) -> list[tuple[int, int]]:
    """(header offset, payload length) of each record, read naively for the damage tests."""
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        offsets.append((pos, length))
        pos += 16 + length
    return offsets


def only_file(folder: Path, pattern: str = "*") -> Path:
    (path,) = [Path(p) for p in glob.glob(os.path.join(folder, pattern)) if os.path.isfile(p)]
    return path
