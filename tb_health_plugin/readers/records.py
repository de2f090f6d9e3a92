"""TFRecord framing, shared by tfevents and MindSpore summary files.

A record is `u64 length | u32 masked_crc32c(length) | payload | u32 masked_crc32c(payload)`
(little endian). `scan_records` finds the complete, valid records in a byte buffer with as little
Python work per record as possible: one loop step does the length read and a C CRC32C call; the
header checksums and the CRC masking are checked afterwards with numpy over all records at once.

Damage handling, so a live or damaged file never stops a read:
- a partially written last record is left unconsumed (the next read retries it);
- a record whose payload checksum fails is skipped and counted;
- a header whose checksum fails means its length cannot be trusted: the record is counted and
  the scan resynchronises on the next position holding a valid header;
- a length larger than what the buffer holds only ends the scan (no allocation is sized by it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c
import numpy as np

HEADER_BYTES = 12  # u64 length + u32 masked CRC of the length
FOOTER_BYTES = 4  # u32 masked CRC of the payload
FRAME_BYTES = HEADER_BYTES + FOOTER_BYTES
_CRC_MASK_DELTA = 0xA282EAD8  # TFRecord's masking constant
_CASTAGNOLI_REFLECTED = 0x82F63B78  # CRC32C polynomial, bit-reversed
_RESYNC_WINDOW = 1 << 20  # positions examined per numpy pass while resynchronising

_read_u64 = struct.Struct("<Q").unpack_from


def _crc32c_table() -> np.ndarray:
    crcs = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crcs = np.where(crcs & 1, (crcs >> 1) ^ np.uint32(_CASTAGNOLI_REFLECTED), crcs >> 1)
    return crcs.astype(np.uint32)


_CRC_TABLE = _crc32c_table()


def mask_crc(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC (rotate right by 15 bits, add a constant), vectorised over uint32s."""
    crcs = crcs.astype(np.uint32)
    rotated = (crcs >> np.uint32(15)) | (crcs << np.uint32(17))
    return (rotated.astype(np.uint64) + _CRC_MASK_DELTA).astype(np.uint32)


def masked_crc(data: bytes) -> int:
    """The masked CRC32C of one byte string (for writers and tests)."""
    return int(mask_crc(np.array([google_crc32c.value(data)], dtype=np.uint32))[0])


def _gather_u32(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = np.zeros(offsets.shape[0], dtype=np.uint32)
    for byte in range(4):
        out |= raw[offsets + byte].astype(np.uint32) << np.uint32(8 * byte)
    return out


def header_crc_ok(raw: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Whether the 8 length bytes at each start match the masked CRC stored after them."""
    crc = np.full(starts.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for byte in range(8):
        crc = _CRC_TABLE[(crc ^ raw[starts + byte]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    return mask_crc(crc) == _gather_u32(raw, starts + 8)


@dataclass
class RecordScan:
    """The complete records found in a buffer: payload `buf[starts[i]:starts[i] + lengths[i]]`."""

    starts: np.ndarray  # int64 payload offsets within the buffer
    lengths: np.ndarray  # int64 payload lengths
    consumed: int  # bytes fully dealt with; the next read resumes here
    skipped: int  # damaged records dropped (bad payload checksum or bad header)
    resyncing: bool  # the scan ended while looking for a valid header after a damaged one


def _frame_unchecked(buf: bytes, pos: int, starts: list, lengths: list, crcs: list) -> int:
    """Follow the length fields from `pos` as far as the buffer holds whole records."""
    end_of_buffer = len(buf)
    crc = google_crc32c.value
    append_start, append_length, append_crc = starts.append, lengths.append, crcs.append
    while pos + HEADER_BYTES <= end_of_buffer:
        (length,) = _read_u64(buf, pos)
        payload = pos + HEADER_BYTES
        end = payload + length + FOOTER_BYTES
        if end > end_of_buffer:
            break
        append_start(payload)
        append_length(length)
        append_crc(crc(buf[payload : payload + length]))
        pos = end
    return pos


def _next_valid_header(raw: np.ndarray, pos: int) -> int | None:
    """The first position at or after `pos` whose header checksum is valid, if any."""
    last_start = raw.shape[0] - HEADER_BYTES
    while pos <= last_start:
        candidates = np.arange(pos, min(pos + _RESYNC_WINDOW, last_start + 1), dtype=np.int64)
        hits = np.flatnonzero(header_crc_ok(raw, candidates))
        if hits.size:
            return int(candidates[hits[0]])
        pos = int(candidates[-1]) + 1
    return None


def scan_records(buf: bytes, resyncing: bool = False) -> RecordScan:
    """Find the records of `buf` (which starts at a record boundary unless `resyncing`)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    all_starts: list[np.ndarray] = []
    all_lengths: list[np.ndarray] = []
    skipped = 0
    pos = 0
    while True:
        if resyncing:
            found = _next_valid_header(raw, pos)
            if found is None:
                # Headers not yet complete at the end may still turn out valid.
                pos = max(pos, len(buf) - HEADER_BYTES + 1)
                break
            pos, resyncing = found, False
        starts: list[int] = []
        lengths: list[int] = []
        crcs: list[int] = []
        stop = _frame_unchecked(buf, pos, starts, lengths, crcs)
        starts_arr = np.asarray(starts, dtype=np.int64)
        lengths_arr = np.asarray(lengths, dtype=np.int64)
        headers = starts_arr - HEADER_BYTES
        if stop + HEADER_BYTES <= len(buf):  # the record the scan stopped at must have a sane header
            headers = np.append(headers, stop)
        header_ok = header_crc_ok(raw, headers)
        bad_headers = np.flatnonzero(~header_ok)
        usable = bad_headers[0] if bad_headers.size else starts_arr.shape[0]
        usable = min(int(usable), starts_arr.shape[0])
        starts_arr, lengths_arr = starts_arr[:usable], lengths_arr[:usable]
        stored = _gather_u32(raw, starts_arr + lengths_arr)
        payload_ok = mask_crc(np.asarray(crcs[:usable], dtype=np.uint32)) == stored
        skipped += int(usable - np.count_nonzero(payload_ok))
        all_starts.append(starts_arr[payload_ok])
        all_lengths.append(lengths_arr[payload_ok])
        if not bad_headers.size:
            pos = stop
            break
        skipped += 1
        pos = int(headers[bad_headers[0]]) + 1
        resyncing = True
    return RecordScan(
        starts=np.concatenate(all_starts) if all_starts else np.zeros(0, np.int64),
        lengths=np.concatenate(all_lengths) if all_lengths else np.zeros(0, np.int64),
        consumed=pos,
        skipped=skipped,
        resyncing=resyncing,
    )
