"""Vectorised decoding of the commonest tfevents record: one legacy `simple_value` scalar.

TensorBoard's `EventFileWriter`, tensorboardX, torch's `SummaryWriter` and MindFormers serialise
such an event (fields in number order) as

    09 <wall_time: 8 bytes>  [10 <step: varint>]  2a <len>  0a <len>  0a <tag len> <tag>  15 <float: 4 bytes>

(`step` is omitted when it is 0). This module checks that exact layout for all records at once
with numpy gathers and decodes wall time, step, tag and value without creating protobuf objects.
Records in any other layout (metadata, several values, long tags, tensors, ...) are reported
as not decoded and go through the protobuf path; results are identical either way
(tests/test_readers_fast_path.py checks that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints

WALL_TIME_KEY, STEP_KEY, SUMMARY_KEY, VALUE_KEY, TAG_KEY, SIMPLE_VALUE_KEY = 0x09, 0x10, 0x2A, 0x0A, 0x0A, 0x15
_MAX_STEP_VARINT_BYTES = 9  # 10-byte varints (negative steps) take the protobuf path
_SMALLEST_RECORD = 1 + 8 + 2 + 2 + 2 + 1 + 4  # wall time, summary, value and tag keys, value


@dataclass
class FastScalars:
    decoded: np.ndarray  # bool per record: True if decoded here
    points: ScalarPoints


def _gather(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """raw[offsets] with out-of-range offsets clamped (callers mask those records out)."""
    return raw[np.minimum(offsets, raw.shape[0] - 1)]


def _gather_uint(raw: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(offsets.shape[0], dtype=np.uint64)
    for byte in range(width):
        out |= _gather(raw, offsets + byte).astype(np.uint64) << np.uint64(8 * byte)
    return out


def _varints(raw: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode varints at offsets: (values, sizes in bytes, ok mask for sizes up to 9 bytes)."""
    values = np.zeros(offsets.shape[0], dtype=np.uint64)
    sizes = np.zeros(offsets.shape[0], dtype=np.int64)
    still_reading = np.ones(offsets.shape[0], dtype=bool)
    for byte in range(_MAX_STEP_VARINT_BYTES):
        current = _gather(raw, offsets + byte)
        values |= np.where(still_reading, (current & 0x7F).astype(np.uint64) << np.uint64(7 * byte), np.uint64(0))
        sizes += still_reading
        still_reading &= (current & 0x80) != 0
        if not still_reading.any():
            break
    return values, sizes, ~still_reading


def _tag_ids(raw: np.ndarray, tag_starts: np.ndarray, tag_lengths: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group records by tag bytes: (tag table, tag id per record, utf-8 ok per record)."""
    tags: list[str] = []
    ids = np.zeros(tag_starts.shape[0], dtype=np.int64)
    utf8_ok = np.ones(tag_starts.shape[0], dtype=bool)
    for length in np.unique(tag_lengths).tolist():
        members = np.flatnonzero(tag_lengths == length)
        matrix = raw[tag_starts[members, None] + np.arange(length)] if length else np.zeros((members.shape[0], 0), np.uint8)
        rows = np.ascontiguousarray(matrix).view(np.dtype((np.void, max(length, 1)))) if length else None
        if rows is None:
            unique_rows, inverse = [b""], np.zeros(members.shape[0], dtype=np.int64)
        else:
            unique_rows, inverse = np.unique(rows.reshape(-1), return_inverse=True)
            unique_rows = [row.tobytes() for row in unique_rows]
        table_ids = np.empty(len(unique_rows), dtype=np.int64)
        for position, tag_bytes in enumerate(unique_rows):
            try:
                tags.append(tag_bytes.decode("utf-8"))
                table_ids[position] = len(tags) - 1
            except UnicodeDecodeError:
                table_ids[position] = -1
        ids[members] = table_ids[inverse.reshape(-1)]
        utf8_ok[members] = ids[members] >= 0
    return tags, ids, utf8_ok


def decode_simple_values(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> FastScalars:
    """Decode every record laid out as a single `simple_value` scalar event."""
    ends = starts + lengths
    ok = (lengths >= _SMALLEST_RECORD) & (_gather(raw, starts) == WALL_TIME_KEY)
    pos = starts + 9
    has_step = _gather(raw, pos) == STEP_KEY
    step_values, step_sizes, step_ok = _varints(raw, pos + 1)
    ok &= ~has_step | step_ok
    pos = pos + np.where(has_step, 1 + step_sizes, 0)
    summary_length = _gather(raw, pos + 1).astype(np.int64)
    value_length = _gather(raw, pos + 3).astype(np.int64)
    tag_length = _gather(raw, pos + 5).astype(np.int64)
    tag_start = pos + 6
    value_key_at = tag_start + tag_length
    ok &= (_gather(raw, pos) == SUMMARY_KEY) & (_gather(raw, pos + 2) == VALUE_KEY) & (_gather(raw, pos + 4) == TAG_KEY)
    ok &= (summary_length < 0x80) & (value_length < 0x80) & (tag_length < 0x80)
    ok &= (summary_length == value_length + 2) & (value_length == tag_length + 2 + 5)
    ok &= (value_key_at + 5 == ends) & (_gather(raw, value_key_at) == SIMPLE_VALUE_KEY)

    picked = np.flatnonzero(ok)
    tags, tag_ids, utf8_ok = _tag_ids(raw, tag_start[picked], tag_length[picked])
    picked, tag_ids = picked[utf8_ok], tag_ids[utf8_ok]
    decoded = np.zeros(starts.shape[0], dtype=bool)
    decoded[picked] = True
    wall_times = _gather_uint(raw, starts[picked] + 1, 8).view(np.float64)
    values = _gather_uint(raw, value_key_at[picked] + 1, 4).astype(np.uint32).view(np.float32).astype(np.float64)
    steps = np.where(has_step[picked], step_values[picked], np.uint64(0)).view(np.int64)
    return FastScalars(decoded, ScalarPoints(tags, tag_ids, picked.astype(np.int64), steps, wall_times, values))
