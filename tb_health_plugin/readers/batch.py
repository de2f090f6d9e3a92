"""Parse many framed record payloads with one protobuf call.

The framed bytes are copied once and each record's 12-byte header and 4-byte footer are
rewritten in place so that the whole run of records becomes a valid `EventBatch` message:
`field 1 + varint length` right before each payload (the repeated `events` field), and the
remaining header and footer bytes turn into a padding varint field (number 2) that the
container declares as a singular field (each occurrence overwrites the last, nothing piles up).
Contiguous runs of records therefore cost one memcpy plus one upb parse.

A run that fails to parse as a whole (an undecodable payload) is split in halves until the bad
records are isolated; they are counted, the others are kept.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from tb_health_plugin.readers.records import FOOTER_BYTES, HEADER_BYTES

PADDING_FIELD_TAG = 0x10  # field 2, wire type 0 (varint)
MAX_BATCH_BYTES = 8 << 20  # bounds the memory of the parsed message objects per call


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    sizes = np.ones(values.shape[0], dtype=np.int64)
    remaining = values >> 7
    while np.any(remaining):
        sizes += remaining > 0
        remaining = remaining >> 7
    return sizes


def _write_padding(out: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> None:
    """Write a padding varint field of exactly `sizes` (>= 2) bytes at each start."""
    out[starts] = PADDING_FIELD_TAG
    longest = int(sizes.max()) if sizes.shape[0] else 0
    for byte in range(1, longest):
        inside = byte < sizes
        out[starts[inside] + byte] = np.where(byte == sizes[inside] - 1, 0x00, 0x80)


def rewrite_as_batch(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The bytes of contiguous framed records `raw[starts-12 : starts+lengths+4]` as one EventBatch."""
    first, last = int(starts[0]) - HEADER_BYTES, int(starts[-1] + lengths[-1]) + FOOTER_BYTES
    out = raw[first:last].copy()
    starts = starts - first
    sizes = _varint_sizes(lengths)
    prefix_starts = starts - 1 - sizes
    out[prefix_starts] = 0x0A  # field 1, length-delimited
    for byte in range(int(sizes.max())):
        inside = byte < sizes
        shifted = (lengths[inside] >> (7 * byte)) & 0x7F
        continuation = np.where(byte < sizes[inside] - 1, 0x80, 0x00)
        out[prefix_starts[inside] + 1 + byte] = shifted | continuation
    _write_padding(out, starts - HEADER_BYTES, HEADER_BYTES - 1 - sizes)
    _write_padding(out, starts + lengths, np.full(starts.shape[0], FOOTER_BYTES, dtype=np.int64))
    return out.tobytes()


def _contiguous_runs(starts: np.ndarray, lengths: np.ndarray):
    """Index ranges of records that follow each other directly, cut to MAX_BATCH_BYTES."""
    if starts.shape[0] == 0:
        return
    ends = starts + lengths + FOOTER_BYTES
    breaks = np.flatnonzero(starts[1:] - HEADER_BYTES != ends[:-1]) + 1
    edges = [0, *breaks.tolist(), starts.shape[0]]
    for begin, end in zip(edges[:-1], edges[1:], strict=True):
        while begin < end:
            budget = starts[begin] + MAX_BATCH_BYTES
            stop = int(np.searchsorted(starts[begin:end] + lengths[begin:end], budget, side="right")) + begin
            stop = max(stop, begin + 1)
            yield begin, stop
            begin = stop


def parse_events(batch_class, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[list, int]:
    """Parse every record into an event message: ([(record index, event), ...], undecodable count)."""
    parsed: list = []
    bad = 0
    for begin, end in _contiguous_runs(starts, lengths):
        pending = [(begin, end)]
        while pending:
            lo, hi = pending.pop()
            try:
                events = batch_class.FromString(rewrite_as_batch(raw, starts[lo:hi], lengths[lo:hi])).events
            except DecodeError:
                if hi - lo == 1:
                    bad += 1
                else:
                    mid = (lo + hi) // 2
                    pending.extend([(mid, hi), (lo, mid)])  # the lower half is parsed first
                continue
            parsed.extend(zip(range(lo, hi), events, strict=True))
    return parsed, bad
