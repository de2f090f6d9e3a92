"""Parse many framed record payloads with one protobuf call.

The framed bytes are copied once and rewritten in place so that a whole stretch of the buffer
becomes one valid `EventBatch` message:
- each selected record's 12-byte header becomes a padding varint (field 2, declared singular, so
  nothing piles up) followed by the key and length of one `events` entry (field 1);
- the bytes after its payload, up to the next selected record (its 4-byte footer, plus any
  records handled elsewhere, such as scalars the vectorised path already decoded), become one
  `skipped` bytes field (field 3, singular too).
So any selection of records costs one memcpy plus one upb parse per stretch of up to
MAX_BATCH_BYTES.

A stretch that fails to parse as a whole (an undecodable payload) is split in halves until the
bad records are isolated; they are counted, the others are kept.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from tb_health_plugin.readers.records import FOOTER_BYTES, HEADER_BYTES

EVENTS_FIELD_KEY = 0x0A  # field 1, length-delimited
PADDING_FIELD_KEY = 0x10  # field 2, varint
SKIPPED_FIELD_KEY = 0x1A  # field 3, length-delimited
SKIPPED_LENGTH_BYTES = 3  # the skipped field's length is always written as a 3-byte varint ...
MAX_SKIPPED_BYTES = (1 << (7 * SKIPPED_LENGTH_BYTES)) - 1  # ... so gaps longer than this split a stretch
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
    out[starts] = PADDING_FIELD_KEY
    longest = int(sizes.max()) if sizes.shape[0] else 0
    for byte in range(1, longest):
        inside = byte < sizes
        out[starts[inside] + byte] = np.where(byte == sizes[inside] - 1, 0x00, 0x80)


def rewrite_as_batch(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The bytes from the first selected record's header to the last one's footer as one EventBatch."""
    first, last = int(starts[0]) - HEADER_BYTES, int(starts[-1] + lengths[-1]) + FOOTER_BYTES
    out = raw[first:last].copy()
    starts = starts - first
    sizes = _varint_sizes(lengths)
    prefix_starts = starts - 1 - sizes
    out[prefix_starts] = EVENTS_FIELD_KEY
    for byte in range(int(sizes.max())):
        inside = byte < sizes
        shifted = (lengths[inside] >> (7 * byte)) & 0x7F
        continuation = np.where(byte < sizes[inside] - 1, 0x80, 0x00)
        out[prefix_starts[inside] + 1 + byte] = shifted | continuation
    _write_padding(out, starts - HEADER_BYTES, HEADER_BYTES - 1 - sizes)
    gap_starts = starts + lengths
    gap_ends = np.append(starts[1:] - HEADER_BYTES, out.shape[0])
    skipped = gap_ends - gap_starts - 1 - SKIPPED_LENGTH_BYTES  # footer (4 bytes) included
    out[gap_starts] = SKIPPED_FIELD_KEY
    for byte in range(SKIPPED_LENGTH_BYTES):
        continuation = 0x80 if byte < SKIPPED_LENGTH_BYTES - 1 else 0x00
        out[gap_starts + 1 + byte] = ((skipped >> (7 * byte)) & 0x7F) | continuation
    return out.tobytes()


def _stretches(starts: np.ndarray, lengths: np.ndarray):
    """Index ranges of records parsed together: span up to MAX_BATCH_BYTES, no gap over MAX_SKIPPED_BYTES."""
    if starts.shape[0] == 0:
        return
    gaps = (starts[1:] - HEADER_BYTES) - (starts[:-1] + lengths[:-1]) - 1 - SKIPPED_LENGTH_BYTES
    breaks = np.flatnonzero(gaps > MAX_SKIPPED_BYTES) + 1
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
    for begin, end in _stretches(starts, lengths):
        pending = [(begin, end)]
        while pending:
            lo, hi = pending.pop()
            try:
                events = batch_class.FromString(rewrite_as_batch(raw, starts[lo:hi], lengths[lo:hi])).events
            except (DecodeError, UnicodeDecodeError):  # the pure-python backend raises the latter
                if hi - lo == 1:
                    bad += 1
                else:
                    mid = (lo + hi) // 2
                    pending.extend([(mid, hi), (lo, mid)])  # the lower half is parsed first
                continue
            parsed.extend(zip(range(lo, hi), events, strict=True))
    return parsed, bad
