"""Write a run's series as tfevents with TensorBoard's own writer, so TensorBoard's Scalars,
Histograms and Distributions tabs show them (used by `tb-health convert` for MindSpore logs).

Points that share a step and a wall time go into one event, as MindSpore wrote them. Histograms
become legacy `HistogramProto`s (right bucket edges; TensorBoard rebuilds the left ones from
`min`). TensorBoard histograms cannot hold MindSpore's NaN/Inf counts: when a histogram series
has any, they are written as two extra scalar tags, `<tag>/nan_count` and `<tag>/inf_count`.
A histogram with no finite value has no buckets and is left out (counted in the stats).
A network graph (`graph_event`, an `Event` holding a `graph_def`) goes first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_health_plugin.readers.discovery import CONVERTED_SUFFIX
from tb_health_plugin.run_data import RunData


@dataclass
class WriteStats:
    scalar_points: int = 0
    histogram_points: int = 0
    empty_histograms: int = 0  # all values NaN/Inf: nothing TensorBoard can draw
    folder: str = ""


def histogram_proto(buckets: np.ndarray) -> HistogramProto:
    """(left, right, count) rows as TensorBoard's legacy histogram."""
    lefts, rights, counts = buckets[:, 0], buckets[:, 1], buckets[:, 2]
    centres = (lefts + rights) / 2
    return HistogramProto(
        min=float(lefts[0]), max=float(rights[-1]), num=float(counts.sum()),
        sum=float((centres * counts).sum()), sum_squares=float((centres**2 * counts).sum()),
        bucket_limit=rights.tolist(), bucket=counts.tolist(),
    )


def _nonfinite_scalars(run: RunData) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    extra = {}
    for tag, series in run.histograms.items():
        for suffix, counts in (("nan_count", series.nan_counts), ("inf_count", series.inf_counts)):
            if np.any(counts):
                extra[f"{tag}/{suffix}"] = (series.steps, series.wall_times, counts.astype(np.float64))
    return extra


def write_run(run: RunData, folder: Path, nonfinite_scalars: bool = True, graph_event: Event | None = None) -> WriteStats:
    """Write `run` (and the network graph's event, if any) into one new tfevents file in `folder`."""
    stats = WriteStats()
    values_at: dict[tuple[int, float], list[Summary.Value]] = defaultdict(list)
    scalars = {tag: (s.steps, s.wall_times, s.values) for tag, s in run.scalars.items()}
    if nonfinite_scalars:
        scalars.update(_nonfinite_scalars(run))
    for tag, (steps, wall_times, values) in scalars.items():
        for step, wall, value in zip(steps.tolist(), wall_times.tolist(), values.tolist(), strict=True):
            values_at[(step, wall)].append(Summary.Value(tag=tag, simple_value=value))
            stats.scalar_points += 1
    for tag, series in run.histograms.items():
        for step, wall, buckets in zip(series.steps.tolist(), series.wall_times.tolist(), series.buckets, strict=True):
            if buckets.shape[0] == 0:
                stats.empty_histograms += 1
                continue
            values_at[(step, wall)].append(Summary.Value(tag=tag, histo=histogram_proto(buckets)))
            stats.histogram_points += 1
    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder), max_queue_size=1000, filename_suffix=CONVERTED_SUFFIX)
    if graph_event is not None:
        writer.add_event(graph_event)
    for (step, wall), values in sorted(values_at.items()):
        writer.add_event(Event(step=step, wall_time=wall, summary=Summary(value=values)))
    writer.close()
    stats.folder = str(folder)
    return stats
