"""Vectorised reading of protobuf wire-format fields at many offsets of one byte buffer at once.

The building blocks of the fast decoding paths (`fast_scalars`, `fast_mindspore`): each call
handles one field for every record, so the Python cost is per batch, not per record.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_health_plugin.readers.records import read_uint_at

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
_PEELED_HASHES = 16  # distinct hashes picked off one pass each before sorting the rest


def _words_at(raw: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """The `length` bytes at each start as little-endian 8-byte words, zero past `length`:
    (rows, ceil(length / 8)) uint64, read without first gathering a byte matrix."""
    columns = -(-length // 8)
    words = np.empty((starts.shape[0], columns), np.uint64)
    whole = starts + 8 * columns <= raw.shape[0]  # the last word reads past the tag: inside the buffer?
    inside, near_end = np.flatnonzero(whole), np.flatnonzero(~whole)
    for column in range(columns):
        offsets = starts + 8 * column
        words[inside, column] = read_uint_at(raw, offsets[inside], 8)
        if near_end.shape[0]:  # byte by byte, clamped: the bytes past the buffer are masked off below
            words[near_end, column] = gather_uint(raw, offsets[near_end], 8)
    tail = length - 8 * (columns - 1)
    if tail < 8:
        words[:, -1] &= np.uint64((1 << (8 * tail)) - 1)
    return words


def _distinct(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct hash's first row, each row's position among them). A batch
    holds few tags of one length: each is picked off in one pass; only beyond
    `_PEELED_HASHES` are the rest sorted (`np.unique`)."""
    inverse = np.empty(hashes.shape[0], np.int64)
    firsts: list[int] = []
    remaining = np.arange(hashes.shape[0])
    while remaining.shape[0] and len(firsts) < _PEELED_HASHES:
        same = hashes[remaining] == hashes[remaining[0]]
        inverse[remaining[same]] = len(firsts)
        firsts.append(int(remaining[0]))
        remaining = remaining[~same]
    first = np.asarray(firsts, np.int64)
    if remaining.shape[0]:
        _unique, rest_first, rest_inverse = np.unique(hashes[remaining], return_index=True, return_inverse=True)
        inverse[remaining] = rest_inverse.reshape(-1) + first.shape[0]
        first = np.concatenate([first, remaining[rest_first]])
    return first, inverse


def _same_length_rows(raw: np.ndarray, starts: np.ndarray, length: int) -> tuple[list[bytes], np.ndarray]:
    """Distinct byte strings of `length` bytes at `starts`, in byte order, and each one's index among them.

    Rows are grouped by a 64-bit hash of their 8-byte words (comparing integers is much cheaper
    than comparing byte strings), then every row is compared with its group's first: should a hash
    ever collide, the rows are grouped by sorting the byte strings instead."""
    words = _words_at(raw, starts, length)
    hashes = words[:, 0].copy()
    for column in range(1, words.shape[1]):
        hashes = hashes * _HASH_MULTIPLIER ^ words[:, column]
    first, inverse = _distinct(hashes)
    if not (words == words[first][inverse]).all():
        matrix = raw[starts[:, None] + np.arange(length)]
        unique_rows, inverse = np.unique(np.ascontiguousarray(matrix).view(np.dtype((np.void, length))).reshape(-1),
                                         return_inverse=True)
        return [row.tobytes() for row in unique_rows], inverse.reshape(-1)
    distinct = [raw[start : start + length].tobytes() for start in starts[first].tolist()]
    by_bytes = sorted(range(len(distinct)), key=distinct.__getitem__)
    position = np.empty(len(distinct), np.int64)
    position[by_bytes] = np.arange(len(distinct))
    return [distinct[index] for index in by_bytes], position[inverse]


def _distinct_lengths(lengths: np.ndarray) -> list[int]:
    """The distinct values of `lengths`, ascending: counted (not sorted) when they are small."""
    if lengths.shape[0] == 0:
        return []
    if int(lengths.min()) >= 0 and int(lengths.max()) < 1 << 16:
        return np.flatnonzero(np.bincount(lengths)).tolist()
    return np.unique(lengths).tolist()


def tag_table(raw: np.ndarray, tag_starts: np.ndarray, tag_lengths: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group records by tag bytes: (tag table, tag id per record, utf-8 ok per record)."""
    tags: list[str] = []
    ids = np.zeros(tag_starts.shape[0], dtype=np.int64)
    utf8_ok = np.ones(tag_starts.shape[0], dtype=bool)
    for length in _distinct_lengths(tag_lengths):
        members = np.flatnonzero(tag_lengths == length)
        if length:
            unique_rows, inverse = _same_length_rows(raw, tag_starts[members], length)
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
