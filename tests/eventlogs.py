"""Write real tfevents files for tests with TensorBoard's own writer and protos."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

WALL_TIME_START = 1_767_000_000.0


def write_scalars(run_dir: Path, series: Mapping[str, tuple[Iterable[int], Iterable[float]]]) -> Path:
    """Write each `tag: (steps, values)` as legacy simple_value scalars into one event file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(run_dir))
    for tag, (steps, values) in series.items():
        for step, value in zip(steps, values, strict=False):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            writer.add_event(Event(wall_time=WALL_TIME_START + int(step), step=int(step), summary=summary))
    writer.close()
    return run_dir
