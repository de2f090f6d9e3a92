"""Vectorised decoding of tensor-encoded scalars: one number in a `Summary.Value.tensor`.

TF2's `tf.summary.scalar` (so Keras and the JAX/Flax metric writers), TensorBoard's `summary_v2`,
torch's and tensorboardX's `new_style` scalars write one such value per event, fields in number
order:

    09 <wall_time: 8>  [10 <step: varint>]  2a <len>  0a <len>
        0a <tag len> <tag>
        42 <tensor len>  08 <dtype>  [12 00 | 12 04 12 02 08 01]  <number>
        [4a <len>  0a <len> 0a 07 "scalars" [12 <len> <content>]
                   [12 <len> <display name>] [1a <len> <description>] [20 <data class>]]

(the tensor shape is `[]`, `[1]` or absent; the metadata naming the scalars plugin is on every
value or only on a tag's first one), where <number> is exactly one of

    22 <itemsize> <bytes>   tensor_content: DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF
    2a 04 <float32>         float_val  (DT_FLOAT)
    32 08 <float64>         double_val (DT_DOUBLE)
    3a <n> <varint>         int_val    (DT_INT32)
    52 <n> <varint>         int64_val  (DT_INT64)
    6a <n> <varint>         half_val   (DT_HALF: the float16 bits)

All records are checked against this layout at once with numpy gathers. Any other record
(another plugin's metadata, a non-ASCII display name or description, bfloat16, negative varints,
several values, fields out of order, ...) is reported as not decoded and goes through the
protobuf path, which gives the same result (tests/test_readers_fast_tensor_scalars.py).

Which plugin a tag's tensors belong to depends on metadata seen on earlier records, so the decoder
(`tfevents.TfeventsDecoder`) gives records back to protobuf when that matters: `with_metadata`
says which decoded records named the scalars plugin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.records import read_uint_at
from tb_health_plugin.readers.wire import event_heads, gather, gather_uint, tag_table, varints

SUMMARY_KEY, VALUE_KEY, TAG_KEY, TENSOR_KEY, METADATA_KEY = 0x2A, 0x0A, 0x0A, 0x42, 0x4A
DTYPE_KEY, SHAPE_KEY, DIM_KEY, DIM_SIZE_KEY = 0x08, 0x12, 0x12, 0x08
CONTENT_KEY, FLOAT_VAL_KEY, DOUBLE_VAL_KEY, INT_VAL_KEY, INT64_VAL_KEY, HALF_VAL_KEY = 0x22, 0x2A, 0x32, 0x3A, 0x52, 0x6A
PLUGIN_DATA_KEY, PLUGIN_NAME_KEY, PLUGIN_CONTENT_KEY = 0x0A, 0x0A, 0x12
DISPLAY_NAME_KEY, DESCRIPTION_KEY, DATA_CLASS_KEY = 0x12, 0x1A, 0x20
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF = 1, 2, 3, 9, 19
SCALARS_PLUGIN_NAME = b"scalars"
SHAPE_OF_ONE = bytes([SHAPE_KEY, 4, DIM_KEY, 2, DIM_SIZE_KEY, 1])  # tensor_shape { dim { size: 1 } }
_LENGTH_CAP = 1 << 40  # lengths beyond any buffer; capping keeps int64 arithmetic exact

# dtype -> (bytes in tensor_content, key of the repeated field holding the value otherwise)
_LAYOUTS = {
    DT_FLOAT: (4, FLOAT_VAL_KEY),
    DT_DOUBLE: (8, DOUBLE_VAL_KEY),
    DT_INT32: (4, INT_VAL_KEY),
    DT_INT64: (8, INT64_VAL_KEY),
    DT_HALF: (2, HALF_VAL_KEY),
}
_ITEMSIZE = np.zeros(256, np.int64)
_FIELD_KEY = np.full(256, -1, np.int64)
for _dtype, (_size, _key) in _LAYOUTS.items():
    _ITEMSIZE[_dtype], _FIELD_KEY[_dtype] = _size, _key
_VARINT_FIELDS = (INT_VAL_KEY, INT64_VAL_KEY, HALF_VAL_KEY)
_FIXED_FIELD_BYTES = {FLOAT_VAL_KEY: 4, DOUBLE_VAL_KEY: 8}


@dataclass
class FastTensorScalars:
    decoded: np.ndarray  # bool per record: True if decoded here
    points: ScalarPoints  # `order` is the record index
    with_metadata: np.ndarray  # bool per point: its record named the scalars plugin


def _short_varints(raw: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`wire.varints` for fields that nearly always fit one byte (lengths): only the others loop."""
    first = gather(raw, offsets)
    longer = np.flatnonzero(first >= 0x80)
    values = first.astype(np.uint64)
    sizes = np.ones(offsets.shape[0], dtype=np.int64)
    ok = np.ones(offsets.shape[0], dtype=bool)
    if longer.shape[0]:
        values[longer], sizes[longer], ok[longer] = varints(raw, offsets[longer])
    return values, sizes, ok


def _u64_at(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The 8 little-endian bytes at each offset as uint64 (bytes past the buffer's end read as its last)."""
    last_start = raw.shape[0] - 8
    out = read_uint_at(raw, np.clip(offsets, 0, max(last_start, 0)), 8) if last_start >= 0 else np.zeros(offsets.shape[0], np.uint64)
    near_end = np.flatnonzero(offsets > last_start)
    if near_end.shape[0]:
        out[near_end] = gather_uint(raw, offsets[near_end], 8)
    return out


def _length_delimited(raw: np.ndarray, at: np.ndarray, key: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ok, start of contents, end of contents) of a length-delimited field expected at `at`."""
    lengths, sizes, ok = _short_varints(raw, at + 1)
    ok &= gather(raw, at) == key
    start = at + 1 + sizes
    return ok, start, start + np.minimum(lengths, _LENGTH_CAP).astype(np.int64)


def _optional_field(raw: np.ndarray, at: np.ndarray, end: np.ndarray, key: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(present, ok, end of field) of an optional length-delimited field at `at`; absent fields end at `at`."""
    present = (at < end) & (gather(raw, at) == key)
    ok, _start, field_end = _length_delimited(raw, at, key)
    ok = ~present | (ok & (field_end <= end))
    return present, ok, np.where(present, field_end, at)


def _ascii_only(raw: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each byte range is pure ASCII (so valid UTF-8): no byte >= 0x80 falls inside it."""
    high = np.flatnonzero(raw >= 0x80)
    return np.searchsorted(high, start, side="left") == np.searchsorted(high, end, side="left")


def _metadata_ok(raw: np.ndarray, at: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Records whose metadata (starting at `at`, ending at `end`) names the scalars plugin, and
    holds nothing protobuf could reject or that another reading could depend on."""
    ok, plugin_start, plugin_end = _length_delimited(raw, at, PLUGIN_DATA_KEY)
    name_ok, name_start, name_end = _length_delimited(raw, plugin_start, PLUGIN_NAME_KEY)
    ok &= name_ok & (name_end - name_start == len(SCALARS_PLUGIN_NAME))
    for position, byte in enumerate(SCALARS_PLUGIN_NAME):
        ok &= gather(raw, name_start + position) == byte
    _present, content_ok, content_end = _optional_field(raw, name_end, plugin_end, PLUGIN_CONTENT_KEY)
    ok &= content_ok & (content_end == plugin_end) & (plugin_end <= end)
    cursor = plugin_end
    for key in (DISPLAY_NAME_KEY, DESCRIPTION_KEY):
        present, field_ok, field_end = _optional_field(raw, cursor, end, key)
        ok &= field_ok
        strings = np.flatnonzero(present)
        if strings.shape[0]:
            ok[strings] &= _ascii_only(raw, cursor[strings], field_end[strings])
        cursor = field_end
    has_class = (cursor < end) & (gather(raw, cursor) == DATA_CLASS_KEY)
    _values, class_sizes, class_ok = _short_varints(raw, cursor + 1)
    ok &= ~has_class | class_ok
    cursor = np.where(has_class, cursor + 1 + class_sizes, cursor)
    return ok & (cursor == end)


def _numbers(raw: np.ndarray, dtype: np.ndarray, at: np.ndarray, field_key: np.ndarray) -> np.ndarray:
    """The number of each tensor as float64, from its layout (checked by the caller)."""
    bits = _u64_at(raw, at)
    is_varint = np.flatnonzero(np.isin(field_key, _VARINT_FIELDS))
    if is_varint.shape[0]:
        bits[is_varint] = varints(raw, at[is_varint])[0]
    low32 = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    low16 = (bits & np.uint64(0xFFFF)).astype(np.uint16)
    return np.select(
        [dtype == DT_FLOAT, dtype == DT_DOUBLE, dtype == DT_INT32, dtype == DT_INT64],
        [low32.view(np.float32).astype(np.float64), bits.view(np.float64),
         low32.view(np.int32).astype(np.float64), bits.view(np.int64).astype(np.float64)],
        default=low16.view(np.float16).astype(np.float64),
    )


def decode_tensor_scalars(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> FastTensorScalars:
    """Decode every record laid out as one tensor-encoded scalar (see the module docstring)."""
    ends = starts + lengths
    heads = event_heads(raw, starts, lengths, 16)
    ok, pos = heads.ok, heads.after
    summary_ok, summary_start, summary_end = _length_delimited(raw, pos, SUMMARY_KEY)
    value_ok, value_start, value_end = _length_delimited(raw, summary_start, VALUE_KEY)
    tag_ok, tag_start, tag_end = _length_delimited(raw, value_start, TAG_KEY)
    ok &= summary_ok & value_ok & tag_ok & (summary_end == ends) & (value_end == ends) & (tag_end <= ends)
    tensor_ok, tensor_start, tensor_end = _length_delimited(raw, tag_end, TENSOR_KEY)
    ok &= tensor_ok & (tensor_end <= ends) & (gather(raw, tensor_start) == DTYPE_KEY)
    dtype = gather(raw, tensor_start + 1).astype(np.int64)  # a one-byte varint when it is one we know
    ok &= _ITEMSIZE[dtype] > 0

    at = tensor_start + 2
    empty_shape = (gather(raw, at) == SHAPE_KEY) & (gather(raw, at + 1) == 0)
    shape_of_one = np.ones(at.shape[0], dtype=bool)
    for position, byte in enumerate(SHAPE_OF_ONE):
        shape_of_one &= gather(raw, at + position) == byte
    at = at + np.where(empty_shape, 2, np.where(shape_of_one, len(SHAPE_OF_ONE), 0))

    field_key = gather(raw, at).astype(np.int64)
    field_length = gather(raw, at + 1).astype(np.int64)  # every accepted layout has a one-byte length
    value_at = at + 2
    is_content = field_key == CONTENT_KEY
    ok &= is_content | (field_key == _FIELD_KEY[dtype])
    ok &= np.where(is_content, field_length == _ITEMSIZE[dtype], True)
    for key, size in _FIXED_FIELD_BYTES.items():
        ok &= (field_key != key) | (field_length == size)
    in_varint_field = np.flatnonzero(np.isin(field_key, _VARINT_FIELDS))
    if in_varint_field.shape[0]:
        varint_values, varint_sizes, varint_ok = varints(raw, value_at[in_varint_field])
        varint_ok &= varint_sizes == field_length[in_varint_field]
        varint_ok &= (field_key[in_varint_field] != HALF_VAL_KEY) | (varint_values < np.uint64(1 << 16))
        ok[in_varint_field] &= varint_ok
    ok &= value_at + field_length == tensor_end

    has_metadata = (tensor_end < ends) & (gather(raw, tensor_end) == METADATA_KEY)
    ok &= has_metadata | (tensor_end == ends)
    checking = np.flatnonzero(ok & has_metadata)
    if checking.shape[0]:
        metadata_ok, metadata_start, metadata_end = _length_delimited(raw, tensor_end[checking], METADATA_KEY)
        metadata_ok &= metadata_end == ends[checking]
        ok[checking] = metadata_ok & _metadata_ok(raw, metadata_start, metadata_end)

    picked = np.flatnonzero(ok)
    tags, tag_ids, utf8_ok = tag_table(raw, tag_start[picked], (tag_end - tag_start)[picked])
    picked, tag_ids = picked[utf8_ok], tag_ids[utf8_ok]
    decoded = np.zeros(starts.shape[0], dtype=bool)
    decoded[picked] = True
    wall_times = _u64_at(raw, starts[picked] + 1).view(np.float64)
    steps = heads.steps(picked)
    values = _numbers(raw, dtype[picked], value_at[picked], field_key[picked])
    points = ScalarPoints(tags, tag_ids, picked.astype(np.int64), steps, wall_times, values)
    return FastTensorScalars(decoded, points, has_metadata[picked])
