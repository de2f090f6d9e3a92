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
from tb_health_plugin.readers.wire import event_heads, gather, gather_uint, tag_table

SUMMARY_KEY, VALUE_KEY, TAG_KEY, SIMPLE_VALUE_KEY = 0x2A, 0x0A, 0x0A, 0x15
_SMALLEST_RECORD = 1 + 8 + 2 + 2 + 2 + 1 + 4  # wall time, summary, value and tag keys, value


@dataclass
class FastScalars:
    decoded: np.ndarray  # bool per record: True if decoded here
    points: ScalarPoints


def decode_simple_values(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> FastScalars:
    """Decode every record laid out as a single `simple_value` scalar event."""
    ends = starts + lengths
    heads = event_heads(raw, starts, lengths, _SMALLEST_RECORD)
    ok, pos = heads.ok, heads.after
    summary_length = gather(raw, pos + 1).astype(np.int64)
    value_length = gather(raw, pos + 3).astype(np.int64)
    tag_length = gather(raw, pos + 5).astype(np.int64)
    tag_start = pos + 6
    value_key_at = tag_start + tag_length
    ok &= (gather(raw, pos) == SUMMARY_KEY) & (gather(raw, pos + 2) == VALUE_KEY) & (gather(raw, pos + 4) == TAG_KEY)
    ok &= (summary_length < 0x80) & (value_length < 0x80) & (tag_length < 0x80)
    ok &= (summary_length == value_length + 2) & (value_length == tag_length + 2 + 5)
    ok &= (value_key_at + 5 == ends) & (gather(raw, value_key_at) == SIMPLE_VALUE_KEY)

    picked = np.flatnonzero(ok)
    tags, tag_ids, utf8_ok = tag_table(raw, tag_start[picked], tag_length[picked])
    picked, tag_ids = picked[utf8_ok], tag_ids[utf8_ok]
    decoded = np.zeros(starts.shape[0], dtype=bool)
    decoded[picked] = True
    wall_times = gather_uint(raw, starts[picked] + 1, 8).view(np.float64)
    values = gather_uint(raw, value_key_at[picked] + 1, 4).astype(np.uint32).view(np.float32).astype(np.float64)
    steps = heads.steps(picked)
    return FastScalars(decoded, ScalarPoints(tags, tag_ids, picked.astype(np.int64), steps, wall_times, values))
