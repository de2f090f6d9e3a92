"""Write scalar series into a TensorBoard event file, the way a training loop would.

One `Event` per (step, tag) with a `simple_value`, through tensorboard's own `EventFileWriter`
(the format every reader must understand). Used by the benchmark cases, synthetic and real.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

WALL_START = 1.7e9  # an arbitrary but plausible wall-clock origin, seconds
SECONDS_PER_STEP = 0.1


def write_scalars(folder: Path, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Write `{tag: (steps, values)}` into one event file in `folder`, in step order."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder), max_queue_size=4096, flush_secs=3600)
    rows = [
        (int(step), tag, float(value))
        for tag, (steps, values) in series.items()
        for step, value in zip(np.asarray(steps).tolist(), np.asarray(values, dtype=np.float64).tolist(), strict=True)
    ]
    rows.sort(key=lambda row: row[0])
    for step, tag, value in rows:
        writer.add_event(
            Event(
                step=step,
                wall_time=WALL_START + step * SECONDS_PER_STEP,
                summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]),
            )
        )
    writer.close()
