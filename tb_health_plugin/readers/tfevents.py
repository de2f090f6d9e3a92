"""Decode TensorBoard `Event` records (TensorBoard, tf.summary, tensorboardX, torch, MindFormers).

Handled value kinds: legacy `simple_value` scalars, legacy `HistogramProto`, and tensors routed
by their summary metadata's plugin name (`scalars`, `histograms` as `[k, 3]`, `text`). TF2
writers put the metadata only on a tag's first value, so the plugin of each tag is remembered
per run. Tensors without any metadata are classified by shape: one number is a scalar, `[k, 3]`
a histogram, strings are text. Everything else (images, audio, graphs, hparams) is skipped.

The common cases, a `simple_value` record and a tensor-encoded scalar, are decoded without protobuf by
`fast_scalars` and `fast_tensor_scalars`; protobuf decodes the rest.
"""

from __future__ import annotations

import math

import numpy as np

from tb_health_plugin.readers import fast_scalars, fast_tensor_scalars
from tb_health_plugin.readers.batch import parse_events
from tb_health_plugin.readers.points import (
    DecodedBatch,
    HistogramPoint,
    ScalarPoints,
    TextPoint,
    latest_wall_time,
)
from tb_health_plugin.readers.schema import TbEventBatch

SCALARS_PLUGIN, HISTOGRAMS_PLUGIN, TEXT_PLUGIN = "scalars", "histograms", "text"
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64 = 1, 2, 3, 9  # tensorboard.DataType numbers
_NUMERIC_KINDS = "biuf"


def legacy_histogram_buckets(histo) -> np.ndarray:
    """`HistogramProto` (right edges only) as (left, right, count) rows, as TensorBoard migrates it."""
    limits = np.asarray(histo.bucket_limit, dtype=np.float64)
    counts = np.asarray(histo.bucket, dtype=np.float64)
    if limits.shape[0] == 0 or counts.shape[0] != limits.shape[0]:
        return np.zeros((0, 3), dtype=np.float64)
    lefts = np.concatenate([[histo.min], limits[:-1]])
    rights = np.concatenate([limits[:-1], [histo.max]])
    return np.stack([lefts, rights, counts], axis=1)


_SCALAR_CONTENT = {DT_FLOAT: "<f4", DT_DOUBLE: "<f8", DT_INT32: "<i4", DT_INT64: "<i8"}


def _scalar_tensor_value(tensor) -> float | None:
    """The number in a one-element float/int tensor without building an ndarray (TF2 scalars)."""
    if any(dim.size != 1 for dim in tensor.tensor_shape.dim):
        return None
    for values in (tensor.float_val, tensor.double_val, tensor.int_val, tensor.int64_val):
        if len(values) == 1:
            return float(values[0]) if tensor.dtype in _SCALAR_CONTENT else None
    content = tensor.tensor_content
    dtype = _SCALAR_CONTENT.get(tensor.dtype)
    if dtype is not None and len(content) == np.dtype(dtype).itemsize:
        return float(np.frombuffer(content, dtype=dtype)[0])
    return None


_REPEAT_FILL_LIMIT = 1024  # elements a tensor may expand to from fewer stored values
_STORED_VALUE_FIELDS = ("half_val", "float_val", "double_val", "int_val", "int64_val", "bool_val",
                        "string_val", "uint32_val", "uint64_val")


def _shape_is_plausible(tensor) -> bool:
    """False when the shape claims more elements than the tensor stores (beyond a small fill):
    `make_ndarray` would allocate them all, so a few bytes could ask for gigabytes."""
    stored = len(tensor.tensor_content) + sum(len(getattr(tensor, name)) for name in _STORED_VALUE_FIELDS)
    limit = max(stored, _REPEAT_FILL_LIMIT)
    claimed = 1
    for dim in tensor.tensor_shape.dim:
        if dim.size < 0:
            return False
        claimed *= dim.size
        if claimed > limit:
            return False
    return True


def _text_of(array: np.ndarray) -> str:
    items = [item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item) for item in array.reshape(-1)]
    return "\n".join(items)


class TfeventsDecoder:
    """Decodes batches of one run's tfevents records; remembers each tag's plugin across batches."""

    def __init__(self) -> None:
        self.plugin_by_tag: dict[str, str] = {}

    def decode(self, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> DecodedBatch:
        decoded = DecodedBatch()
        simple = fast_scalars.decode_simple_values(raw, starts, lengths)
        rest = np.flatnonzero(~simple.decoded)
        tensors = fast_tensor_scalars.decode_tensor_scalars(raw, starts[rest], lengths[rest])
        tensors.points.order = rest[tensors.points.order]
        left = rest[~tensors.decoded]
        events, decoded.undecodable = self._parse(raw, starts, lengths, left)
        if len(tensors.points):
            tensor_points, given_back = self._settle_tensor_plugins(tensors, events)
            if given_back.shape[0]:
                more, bad = self._parse(raw, starts, lengths, given_back)
                events = sorted([*events, *more], key=lambda item: item[0])
                decoded.undecodable += bad
        else:
            tensor_points = tensors.points
        for points in (simple.points, tensor_points):
            decoded.scalars.append(points)
            decoded.last_wall_time = latest_wall_time(decoded.last_wall_time, points.wall_times)
        if events:
            self._decode_with_protobuf(decoded, events)
        return decoded

    @staticmethod
    def _parse(raw, starts, lengths, records: np.ndarray) -> tuple[list, int]:
        """Parse the given records with protobuf: ([(record index, event), ...], undecodable count)."""
        if records.shape[0] == 0:
            return [], 0
        events, bad = parse_events(TbEventBatch, raw, starts[records], lengths[records])
        return [(int(records[index]), event) for index, event in events], bad

    def _settle_tensor_plugins(self, tensors, events) -> tuple[ScalarPoints, np.ndarray]:
        """Keep the vectorised tensor scalars whose reading cannot depend on record order; give back
        (as record indices) those of tags that protobuf-path tensors of this batch also use, or that an
        earlier batch gave another plugin: they are read in order with the rest, as before."""
        points = tensors.points
        contested = {value.tag for _record, event in events if event.HasField("summary")
                     for value in event.summary.value if value.WhichOneof("value") == "tensor"}
        contested.update(tag for tag in points.tags if self.plugin_by_tag.get(tag, SCALARS_PLUGIN) != SCALARS_PLUGIN)
        given_back_ids = [index for index, tag in enumerate(points.tags) if tag in contested]
        given_back = np.isin(points.tag_ids, given_back_ids)
        for tag_id in np.unique(points.tag_ids[~given_back & tensors.with_metadata]).tolist():
            self.plugin_by_tag[points.tags[tag_id]] = SCALARS_PLUGIN
        kept = ~given_back
        kept_points = ScalarPoints(points.tags, points.tag_ids[kept], points.order[kept], points.steps[kept],
                                   points.wall_times[kept], points.values[kept])
        return kept_points, points.order[given_back]

    def _decode_with_protobuf(self, decoded: DecodedBatch, events: list) -> None:
        tags: list[str] = []
        order: list[int] = []
        steps: list[int] = []
        walls: list[float] = []
        values: list[float] = []
        for record, event in events:
            if not event.HasField("summary"):
                continue
            step, wall = event.step, event.wall_time
            if math.isfinite(wall):
                decoded.last_wall_time = max(decoded.last_wall_time, wall)
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    tags.append(value.tag)
                    order.append(record)
                    steps.append(step)
                    walls.append(wall)
                    values.append(value.simple_value)
                elif kind == "histo":
                    decoded.histograms.append(
                        HistogramPoint(value.tag, record, step, wall, legacy_histogram_buckets(value.histo))
                    )
                elif kind == "tensor":
                    self._decode_tensor(decoded, value, record, step, wall, (tags, order, steps, walls, values))
        decoded.scalars.append(ScalarPoints.from_lists(tags, order, steps, walls, values))

    def _decode_tensor(self, decoded: DecodedBatch, value, record: int, step: int, wall: float, scalar_lists) -> None:
        if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
            self.plugin_by_tag[value.tag] = value.metadata.plugin_data.plugin_name
        plugin = self.plugin_by_tag.get(value.tag)
        if plugin not in (None, SCALARS_PLUGIN, HISTOGRAMS_PLUGIN, TEXT_PLUGIN):
            return
        number = _scalar_tensor_value(value.tensor) if plugin in (None, SCALARS_PLUGIN) else None
        if number is not None:
            for column, item in zip(scalar_lists, (value.tag, record, step, wall, number), strict=True):
                column.append(item)
            return
        if not _shape_is_plausible(value.tensor):
            decoded.undecodable += 1
            return
        # TensorBoard's tensor_util pulls in its TensorFlow stub (and boto3): only for tensors
        # that are not plain scalars, which most logdirs never hold.
        from tensorboard.util import tensor_util

        try:
            array = tensor_util.make_ndarray(value.tensor)
        except Exception:  # noqa: BLE001 - a malformed tensor is skipped like an undecodable record
            decoded.undecodable += 1
            return
        is_number = array.dtype.kind in _NUMERIC_KINDS
        if plugin == TEXT_PLUGIN or (plugin is None and array.dtype.kind in "SUO"):
            decoded.texts.append(TextPoint(value.tag, record, step, wall, _text_of(array)))
        elif is_number and array.size == 1 and plugin in (None, SCALARS_PLUGIN):
            for column, item in zip(scalar_lists, (value.tag, record, step, wall, float(array.reshape(-1)[0])), strict=True):
                column.append(item)
        elif is_number and array.ndim == 2 and array.shape[1] == 3 and plugin in (None, HISTOGRAMS_PLUGIN):
            decoded.histograms.append(HistogramPoint(value.tag, record, step, wall, array.astype(np.float64)))
