"""Vectorised decoding of MindSpore summary events that hold only `scalar_value`s.

`SummaryRecord` writes one event per recorded step with every value of that step in it:

    09 <wall_time: 8>  [10 <step: varint>]  2a <summary len: varint>  then per value:
        0a <value len>  0a <tag len> <tag>  1d <float: 4 bytes>

The values of all events are walked together, one value per event per numpy pass. An event is
decoded here when every value in it is a scalar in this layout; any other event (histograms,
tensors, the version record) goes whole through the protobuf path. Results are identical
(tests/test_readers_mindspore.py compares both paths on real files).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.wire import event_heads, gather, gather_uint, tag_table, varints

SUMMARY_KEY, VALUE_KEY, TAG_KEY, SCALAR_VALUE_KEY = 0x2A, 0x0A, 0x0A, 0x1D
SCALAR_VALUE_BYTES = 5  # key + float32
MAX_VALUES_PER_EVENT = 512  # events with more values take the protobuf path


def decode_scalar_events(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ScalarPoints]:
    """(decoded mask per record, the scalar points of the decoded records)."""
    ends = starts + lengths
    heads = event_heads(raw, starts, lengths, 11)
    ok, pos = heads.ok, heads.after
    ok &= gather(raw, pos) == SUMMARY_KEY
    summary_length, summary_size, summary_ok = varints(raw, pos + 1)
    cursor = pos + 1 + summary_size
    ok &= summary_ok & (cursor + summary_length.astype(np.int64) == ends)

    owners, tag_starts, tag_lengths, value_at = [], [], [], []
    active = np.flatnonzero(ok & (cursor < ends))
    for _ in range(MAX_VALUES_PER_EVENT):
        if active.shape[0] == 0:
            break
        at = cursor[active]
        value_length = gather(raw, at + 1).astype(np.int64)
        tag_length = gather(raw, at + 3).astype(np.int64)
        good = (gather(raw, at) == VALUE_KEY) & (gather(raw, at + 2) == TAG_KEY)
        good &= (value_length < 0x80) & (tag_length < 0x80) & (value_length == tag_length + 2 + SCALAR_VALUE_BYTES)
        good &= gather(raw, at + 4 + tag_length) == SCALAR_VALUE_KEY
        good &= at + 2 + value_length <= ends[active]
        ok[active[~good]] = False
        active, at, tag_length = active[good], at[good], tag_length[good]
        owners.append(active)
        tag_starts.append(at + 4)
        tag_lengths.append(tag_length)
        value_at.append(at + 4 + tag_length)  # the scalar_value key; the float follows it
        cursor[active] = at + 2 + 2 + tag_length + SCALAR_VALUE_BYTES
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
    wall_times = gather_uint(raw, starts[owner] + 1, 8).view(np.float64)
    steps = heads.steps(owner)
    values = gather_uint(raw, value_offset + 1, 4).astype(np.uint32).view(np.float32).astype(np.float64)
    return ok, ScalarPoints(tags, tag_ids, owner.astype(np.int64), steps, wall_times, values)
