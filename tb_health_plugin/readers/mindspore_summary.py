"""Decode MindSpore summary records (`SummaryRecord`, `SummaryCollector`): schema `mindspore.irpb`.

- `scalar_value` -> scalar point;
- `histogram` -> buckets (left, left + width, count) with MindSpore's NaN and +-Inf counts;
- `tensor` -> a scalar point when it holds one number, otherwise a histogram of its values
  (with NaN/Inf counted), which is what the analysis can use of a full tensor.
Images, graphs, explanations and loss landscapes are skipped.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.readers.batch import parse_events
from tb_health_plugin.readers.points import DecodedBatch, HistogramPoint, ScalarPoints
from tb_health_plugin.readers.schema import MsEventBatch

TENSOR_HISTOGRAM_BINS = 30  # buckets of the histogram built from a logged tensor


def histogram_of_values(values: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(k, 3) buckets over the finite values, NaN count, Inf count (both signs)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = values[np.isfinite(values)]
    nan_count = int(np.count_nonzero(np.isnan(values)))
    inf_count = int(values.shape[0] - finite.shape[0] - nan_count)
    if finite.shape[0] == 0:
        return np.zeros((0, 3), dtype=np.float64), nan_count, inf_count
    low, high = float(finite.min()), float(finite.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(finite, bins=TENSOR_HISTOGRAM_BINS, range=(low, high))
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1), nan_count, inf_count


def _tensor_values(tensor) -> np.ndarray:
    for column in (tensor.float_data, tensor.double_data, tensor.int32_data, tensor.int64_data, tensor.uint64_data):
        if len(column):
            return np.asarray(column, dtype=np.float64)
    return np.zeros(0, dtype=np.float64)


def _histogram_buckets(histogram) -> np.ndarray:
    buckets = histogram.buckets
    if not len(buckets):
        return np.zeros((0, 3), dtype=np.float64)
    table = np.array([(b.left, b.width, b.count) for b in buckets], dtype=np.float64)
    table[:, 1] += table[:, 0]  # width -> right edge
    return table


class MindSporeDecoder:
    """Decodes batches of MindSpore summary records."""

    def decode(self, buf: bytes, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> DecodedBatch:
        decoded = DecodedBatch()
        events, decoded.undecodable = parse_events(MsEventBatch, raw, starts, lengths)
        tags: list[str] = []
        order: list[int] = []
        steps: list[int] = []
        walls: list[float] = []
        values: list[float] = []

        def add_scalar(tag: str, record: int, step: int, wall: float, value: float) -> None:
            tags.append(tag)
            order.append(record)
            steps.append(step)
            walls.append(wall)
            values.append(value)

        for record, event in events:
            if not event.HasField("summary"):
                continue
            step, wall = event.step, event.wall_time
            decoded.last_wall_time = max(decoded.last_wall_time, wall)
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "scalar_value":
                    add_scalar(value.tag, record, step, wall, value.scalar_value)
                elif kind == "histogram":
                    histogram = value.histogram
                    decoded.histograms.append(HistogramPoint(
                        value.tag, record, step, wall, _histogram_buckets(histogram),
                        histogram.nan_count, histogram.pos_inf_count + histogram.neg_inf_count,
                    ))
                elif kind == "tensor":
                    numbers = _tensor_values(value.tensor)
                    if numbers.shape[0] == 1:
                        add_scalar(value.tag, record, step, wall, float(numbers[0]))
                    elif numbers.shape[0] > 1:
                        buckets, nan_count, inf_count = histogram_of_values(numbers)
                        decoded.histograms.append(HistogramPoint(value.tag, record, step, wall, buckets, nan_count, inf_count))
        decoded.scalars.append(ScalarPoints.from_lists(tags, order, steps, walls, values))
        return decoded
