"""TFRecord-framed scalar events written straight to a file, fast enough for millions of points.

One `Event` per step holding every tag's `simple_value` (or one per tag and step with
`one_tag_per_event`), framed as TensorBoard's writer frames them. Appending to an existing file
is what a live training does between two checks; the benchmarks use it to grow logdirs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tb_health_plugin.tfrecord import frame  # one TFRecord, framed as TensorBoard's writer does

WALL_START = 1.767e9
FLUSH_EVERY = 100_000  # records buffered before a write


def file_version_record() -> bytes:
    return frame(Event(wall_time=WALL_START, file_version="brain.Event:2").SerializeToString())


def write_scalar_events(path: Path, steps: np.ndarray, series: dict[str, np.ndarray], append: bool = False,
                        one_tag_per_event: bool = True) -> None:
    """Write (or append) the events of `series` ({tag: values aligned with `steps`}) to `path`."""
    chunk: list[bytes] = [] if append else [file_version_record()]
    columns = {tag: np.asarray(values, np.float64).tolist() for tag, values in series.items()}
    with open(path, "ab" if append else "wb") as out:
        for index, step in enumerate(np.asarray(steps).tolist()):
            values = [Summary.Value(tag=tag, simple_value=column[index]) for tag, column in columns.items()]
            groups = [[value] for value in values] if one_tag_per_event else [values]
            for group in groups:
                event = Event(wall_time=WALL_START + step, step=step, summary=Summary(value=group))
                chunk.append(frame(event.SerializeToString()))
            if len(chunk) >= FLUSH_EVERY:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))


def needs_generating(logdir: Path, marker: Path) -> bool:
    """Whether a benchmark must write `logdir` (cleared here) rather than reuse it: `marker` is
    touched by the run that completed it, so a run cut short is never taken as complete."""
    if marker.exists():
        return False
    if logdir.exists():
        shutil.rmtree(logdir)
    return True
