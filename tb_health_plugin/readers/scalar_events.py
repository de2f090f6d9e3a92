"""Vectorised decoding of events whose summary holds only plain float scalars, one or many.

Both tfevents (`Summary.Value.simple_value`, field 2) and MindSpore summaries
(`Summary.Value.scalar_value`, field 3) serialise such an event, fields in number order, as

    09 <wall_time: 8>  [10 <step: varint>]  2a <summary len: varint>  then per value:
        0a <value len>  0a <tag len> <tag>  <value key> <float: 4 bytes>

(`step` is omitted when it is 0). The values of all events are walked together, one value per
event per numpy pass, so the Python cost is per batch and per value position, not per point. An
event is decoded here when every value in it has exactly this layout (tags shorter than 121
bytes, valid UTF-8); any other event (metadata, tensors, histograms, long tags, damage) is
reported as not decoded and goes whole through the protobuf path, which reads it the same.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.records import read_uint_at
from tb_health_plugin.readers.wire import event_heads, gather, tag_table, varints

SUMMARY_KEY, VALUE_KEY, TAG_KEY = 0x2A, 0x0A, 0x0A
SCALAR_BYTES = 5  # the value's key + float32
SMALLEST_EVENT = 1 + 8 + 2  # wall time, summary key and length: an event with an empty summary
MAX_VALUES_PER_EVENT = 512  # events with more values take the protobuf path
_LENGTH_CAP = 1 << 40  # lengths beyond any buffer; capping keeps int64 arithmetic exact


def decode_scalar_summaries(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray, value_key: int,
                            empty_decoded: bool) -> tuple[np.ndarray, ScalarPoints]:
    """(decoded mask per record, the points of the decoded records in write order).

    `value_key` is the float field's key byte; `empty_decoded`: whether an event with an empty
    summary counts as decoded (it yields no point, so its wall time is not the run's latest)."""
    ends = starts + lengths
    heads = event_heads(raw, starts, lengths, SMALLEST_EVENT)
    ok, pos = heads.ok, heads.after
    ok &= gather(raw, pos) == SUMMARY_KEY
    summary_length, summary_size, summary_ok = varints(raw, pos + 1)
    cursor = pos + 1 + summary_size
    ok &= summary_ok & (cursor + np.minimum(summary_length, _LENGTH_CAP).astype(np.int64) == ends)
    if not empty_decoded:
        ok &= cursor < ends

    owners, tag_starts, tag_lengths, value_at = [], [], [], []
    active = np.flatnonzero(ok & (cursor < ends))
    for _ in range(MAX_VALUES_PER_EVENT):
        if active.shape[0] == 0:
            break
        at = cursor[active]
        value_length = gather(raw, at + 1).astype(np.int64)
        tag_length = gather(raw, at + 3).astype(np.int64)
        good = (gather(raw, at) == VALUE_KEY) & (gather(raw, at + 2) == TAG_KEY)
        good &= (value_length < 0x80) & (tag_length < 0x80) & (value_length == tag_length + 2 + SCALAR_BYTES)
        good &= gather(raw, at + 4 + tag_length) == value_key
        good &= at + 2 + value_length <= ends[active]
        ok[active[~good]] = False
        active, at, tag_length = active[good], at[good], tag_length[good]
        owners.append(active)
        tag_starts.append(at + 4)
        tag_lengths.append(tag_length)
        value_at.append(at + 4 + tag_length)  # the value's key; the float follows it
        cursor[active] = at + 2 + 2 + tag_length + SCALAR_BYTES
        active = active[cursor[active] < ends[active]]
    else:
        ok[active] = False  # more values than we walk: leave the event to protobuf

    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    keep = ok[owner]
    owner = owner[keep]
    tag_start = np.concatenate(tag_starts)[keep] if owners else owner
    tag_length = np.concatenate(tag_lengths)[keep] if owners else owner
    value_offset = np.concatenate(value_at)[keep] if owners else owner
    tags, tag_ids, utf8_ok = tag_table(raw, tag_start, tag_length)
    bad_events = np.unique(owner[~utf8_ok])
    if bad_events.shape[0]:
        ok[bad_events] = False
        keep = ok[owner]
        owner, tag_ids, value_offset = owner[keep], tag_ids[keep], value_offset[keep]
    arrangement = np.argsort(owner, kind="stable")  # write order: event, then value within it
    owner, tag_ids, value_offset = owner[arrangement], tag_ids[arrangement], value_offset[arrangement]
    wall_times = read_uint_at(raw, starts[owner] + 1, 8).view(np.float64)
    steps = heads.steps(owner)
    values = read_uint_at(raw, value_offset + 1, 4).view(np.float32).astype(np.float64)
    return ok, ScalarPoints(tags, tag_ids, owner.astype(np.int64), steps, wall_times, values)
