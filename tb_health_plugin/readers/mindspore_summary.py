"""Decode MindSpore summary records (`SummaryRecord`, `SummaryCollector`): schema `mindspore.irpb`.

- `scalar_value` -> scalar point;
- `histogram` -> buckets (left, left + width, count) with MindSpore's NaN and +-Inf counts;
- `tensor` -> a scalar point when it holds one number, otherwise a histogram of its values
  (with NaN/Inf counted), which is what the analysis can use of a full tensor.
Images, graphs, explanations and loss landscapes are skipped. Events holding only scalars are
decoded without protobuf by `fast_mindspore`.
"""

from __future__ import annotations

import math

import numpy as np

from tb_health_plugin.readers.batch import parse_events
from tb_health_plugin.readers.fast_mindspore import decode_scalar_events
from tb_health_plugin.readers.points import (
    DecodedBatch,
    HistogramPoint,
    ScalarPoints,
    clamp_count,
    latest_wall_time,
)
from tb_health_plugin.readers.schema import MsBucket, MsEventBatch
from tb_health_plugin.readers.wire import gather, gather_uint, varints

TENSOR_HISTOGRAM_BINS = 30  # buckets of the histogram built from a logged tensor
_NO_BUCKETS = np.zeros((0, 3), dtype=np.float64)
BUCKET_FIXED_BYTES = 19  # left and width keys and doubles, count key; the count varint follows


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
    if np.isfinite(high - low):
        counts, edges = np.histogram(finite, bins=TENSOR_HISTOGRAM_BINS, range=(low, high))
    else:  # a range wider than the largest double (say -1e308 .. 1e308): spaced in halves
        edges = np.linspace(low / 2, high / 2, TENSOR_HISTOGRAM_BINS + 1) * 2
        bins = np.clip(np.searchsorted(edges, finite, side="right") - 1, 0, TENSOR_HISTOGRAM_BINS - 1)
        counts = np.bincount(bins, minlength=TENSOR_HISTOGRAM_BINS)
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1), nan_count, inf_count


def _tensor_values(tensor) -> np.ndarray:
    for column in (tensor.float_data, tensor.double_data, tensor.int32_data, tensor.int64_data, tensor.uint64_data):
        if len(column):
            return np.asarray(column, dtype=np.float64)
    return np.zeros(0, dtype=np.float64)


def buckets_from_bytes(serialized: list[bytes]) -> np.ndarray:
    """(n, 3) rows (left, left + width, count) from serialized `bucket` messages.

    MindSpore serialises a bucket as `09 <left: 8> 11 <width: 8> 18 <count: varint>`; that
    layout is decoded with numpy for all buckets at once, anything else through protobuf.
    """
    if not serialized:
        return np.zeros((0, 3), dtype=np.float64)
    lengths = np.fromiter(map(len, serialized), dtype=np.int64, count=len(serialized))
    blob = np.frombuffer(b"".join(serialized) + bytes(BUCKET_FIXED_BYTES), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths[:-1])])
    counts, count_sizes, count_ok = varints(blob, offsets + BUCKET_FIXED_BYTES)
    fixed = (gather(blob, offsets) == 0x09) & (gather(blob, offsets + 9) == 0x11) & (gather(blob, offsets + 18) == 0x18)
    fixed &= count_ok & (lengths == BUCKET_FIXED_BYTES + count_sizes)
    table = np.empty((len(serialized), 3), dtype=np.float64)
    table[:, 0] = gather_uint(blob, offsets + 1, 8).view(np.float64)
    table[:, 1] = table[:, 0] + gather_uint(blob, offsets + 10, 8).view(np.float64)
    table[:, 2] = counts.view(np.int64)
    for index in np.flatnonzero(~fixed).tolist():
        bucket = MsBucket.FromString(serialized[index])
        table[index] = (bucket.left, bucket.left + bucket.width, bucket.count)
    return table


def readable_tag(tag: str | bytes) -> str:
    """A tag as text. MindSpore's schema is proto2, whose strings are not checked for UTF-8, so a
    damaged tag can arrive as bytes (or fail to decode): its bytes are kept readable with
    backslash escapes (`b"\\xff"` -> `"\\xff"`), so the series survives under a distinct name."""
    if isinstance(tag, bytes):
        return tag.decode("utf-8", "backslashreplace")
    return tag


class MindSporeDecoder:
    """Decodes batches of MindSpore summary records."""

    def decode(self, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> DecodedBatch:
        decoded = DecodedBatch()
        fast, points = decode_scalar_events(raw, starts, lengths)
        decoded.scalars.append(points)
        decoded.last_wall_time = latest_wall_time(decoded.last_wall_time, points.wall_times)
        rest = np.flatnonzero(~fast)
        if rest.shape[0]:
            self._decode_with_protobuf(decoded, raw, starts[rest], lengths[rest], rest)
        return decoded

    def _decode_with_protobuf(self, decoded: DecodedBatch, raw, starts, lengths, record_ids) -> None:
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

        histograms: list[tuple[HistogramPoint, int]] = []  # point, number of its buckets
        serialized_buckets: list[bytes] = []
        for index, event in events:
            if not event.HasField("summary"):
                continue
            record, step, wall = int(record_ids[index]), event.step, event.wall_time
            if math.isfinite(wall):
                decoded.last_wall_time = max(decoded.last_wall_time, wall)
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                tag = readable_tag(value.tag)
                if kind == "scalar_value":
                    add_scalar(tag, record, step, wall, value.scalar_value)
                elif kind == "histogram":
                    histogram = value.histogram
                    point = HistogramPoint(tag, record, step, wall, _NO_BUCKETS, clamp_count(histogram.nan_count),
                                           clamp_count(clamp_count(histogram.pos_inf_count) + clamp_count(histogram.neg_inf_count)))
                    decoded.histograms.append(point)
                    serialized_buckets.extend(histogram.buckets)
                    histograms.append((point, len(histogram.buckets)))
                elif kind == "tensor":
                    numbers = _tensor_values(value.tensor)
                    if numbers.shape[0] == 1:
                        add_scalar(tag, record, step, wall, float(numbers[0]))
                    elif numbers.shape[0] > 1:
                        buckets, nan_count, inf_count = histogram_of_values(numbers)
                        decoded.histograms.append(HistogramPoint(tag, record, step, wall, buckets, nan_count, inf_count))
        decoded.scalars.append(ScalarPoints.from_lists(tags, order, steps, walls, values))
        table = buckets_from_bytes(serialized_buckets)
        table.flags.writeable = False
        first = 0
        for point, count in histograms:
            point.buckets = table[first : first + count]
            first += count
