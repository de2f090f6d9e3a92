"""Vectorised reading of protobuf wire-format fields at many offsets of one byte buffer at once.

The building blocks of the fast decoding paths (`fast_scalars`, `fast_mindspore`): each call
handles one field for every record, so the Python cost is per batch, not per record.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

MAX_VARINT_BYTES = 9  # 10-byte varints (negative int64) are left to the protobuf path


def gather(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """raw[offsets] with out-of-range offsets clamped (callers mask those records out)."""
    return raw[np.minimum(offsets, raw.shape[0] - 1)]


def gather_uint(raw: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(offsets.shape[0], dtype=np.uint64)
    for byte in range(width):
        out |= gather(raw, offsets + byte).astype(np.uint64) << np.uint64(8 * byte)
    return out


def varints(raw: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode varints at offsets: (values, sizes in bytes, ok mask for sizes up to 9 bytes)."""
    values = np.zeros(offsets.shape[0], dtype=np.uint64)
    sizes = np.zeros(offsets.shape[0], dtype=np.int64)
    still_reading = np.ones(offsets.shape[0], dtype=bool)
    for byte in range(MAX_VARINT_BYTES):
        current = gather(raw, offsets + byte)
        values |= np.where(still_reading, (current & 0x7F).astype(np.uint64) << np.uint64(7 * byte), np.uint64(0))
        sizes += still_reading
        still_reading &= (current & 0x80) != 0
        if not still_reading.any():
            break
    return values, sizes, ~still_reading


_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio): mixes the words


def _same_length_rows(matrix: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """Distinct rows of a byte matrix in byte order, and each row's index among them.

    Rows are grouped by a 64-bit hash of their 8-byte words (sorting integers is much cheaper
    than sorting byte strings), then every row is compared with its group's first: should a hash
    ever collide, the rows are grouped by sorting the byte strings instead."""
    rows, length = matrix.shape
    words = np.zeros((rows, -(-length // 8) * 8), np.uint8)
    words[:, :length] = matrix
    words = words.view("<u8")
    hashes = words[:, 0].copy()
    for column in range(1, words.shape[1]):
        hashes = hashes * _HASH_MULTIPLIER ^ words[:, column]
    _unique, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not (words == words[first][inverse]).all():
        unique_rows, inverse = np.unique(np.ascontiguousarray(matrix).view(np.dtype((np.void, length))).reshape(-1),
                                         return_inverse=True)
        return [row.tobytes() for row in unique_rows], inverse.reshape(-1)
    distinct = [matrix[index].tobytes() for index in first.tolist()]
    by_bytes = sorted(range(len(distinct)), key=distinct.__getitem__)
    position = np.empty(len(distinct), np.int64)
    position[by_bytes] = np.arange(len(distinct))
    return [distinct[index] for index in by_bytes], position[inverse]


def tag_table(raw: np.ndarray, tag_starts: np.ndarray, tag_lengths: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group records by tag bytes: (tag table, tag id per record, utf-8 ok per record)."""
    tags: list[str] = []
    ids = np.zeros(tag_starts.shape[0], dtype=np.int64)
    utf8_ok = np.ones(tag_starts.shape[0], dtype=bool)
    for length in np.unique(tag_lengths).tolist():
        members = np.flatnonzero(tag_lengths == length)
        if length:
            unique_rows, inverse = _same_length_rows(raw[tag_starts[members, None] + np.arange(length)])
        else:
            unique_rows, inverse = [b""], np.zeros(members.shape[0], dtype=np.int64)
        table_ids = np.empty(len(unique_rows), dtype=np.int64)
        for position, tag_bytes in enumerate(unique_rows):
            try:
                tags.append(tag_bytes.decode("utf-8"))
                table_ids[position] = len(tags) - 1
            except UnicodeDecodeError:
                table_ids[position] = -1
        ids[members] = table_ids[inverse]
        utf8_ok[members] = ids[members] >= 0
    return tags, ids, utf8_ok


EVENT_WALL_TIME_KEY, EVENT_STEP_KEY = 0x09, 0x10  # `Event.wall_time` (double), `Event.step` (varint)


class EventHeads(NamedTuple):
    """What every record's head says: whether it reads as `wall_time [step]`, where the field
    after it starts, and the step (0 where the writer omitted it, as protobuf does for 0)."""

    ok: np.ndarray
    after: np.ndarray
    has_step: np.ndarray
    step_values: np.ndarray

    def steps(self, picked: np.ndarray) -> np.ndarray:
        return np.where(self.has_step[picked], self.step_values[picked], np.uint64(0)).view(np.int64)


def event_heads(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray, smallest: int) -> EventHeads:
    """Decode the head every serialised `Event` of the fast paths begins with,
    `09 <wall_time: 8 bytes> [10 <step: varint>]`, for all records at once; records shorter than
    `smallest` (the least a layout needs) are not `ok`."""
    ok = (lengths >= smallest) & (gather(raw, starts) == EVENT_WALL_TIME_KEY)
    pos = starts + 9
    has_step = gather(raw, pos) == EVENT_STEP_KEY
    step_values, step_sizes, step_ok = varints(raw, pos + 1)
    ok &= ~has_step | step_ok
    return EventHeads(ok, pos + np.where(has_step, 1 + step_sizes, 0), has_step, step_values)
