"""TFRecord framing, shared by tfevents and MindSpore summary files.

A record is `u64 length | u32 masked_crc32c(length) | payload | u32 masked_crc32c(payload)`
(little endian; `tb_health_plugin.tfrecord` defines it once, for writers too). `scan_records` finds the complete, valid records in a byte buffer with as little
Python work per record as possible: record boundaries are predicted from the repeating pattern
of record sizes and verified with numpy (a tight loop follows the length fields where the
pattern breaks), numpy checks every header checksum at once, one C CRC32C call per payload follows, and numpy compares the masked
CRCs with the stored ones.

Damage handling, so a live or damaged file never stops a read:
- a partially written last record is left unconsumed (the next read retries it);
- a record whose payload checksum fails is skipped and counted, and its length is not trusted
  either (a length can lie with a valid checksum of its own): the scan resynchronises on the
  next position after its header holding a valid header, so the records it spanned are kept;
- a header whose checksum fails means its length cannot be trusted: the record is counted and
  the scan resynchronises on the next position holding a valid header;
- a length larger than what the buffer holds only ends the scan (no allocation is sized by it).
"""

from __future__ import annotations

from dataclasses import dataclass

import google_crc32c
import numpy as np

from tb_health_plugin.tfrecord import MASK_DELTA

HEADER_BYTES = 12  # u64 length + u32 masked CRC of the length
FOOTER_BYTES = 4  # u32 masked CRC of the payload
FRAME_BYTES = HEADER_BYTES + FOOTER_BYTES
_CASTAGNOLI_REFLECTED = 0x82F63B78  # CRC32C polynomial, bit-reversed
RESYNC_WINDOW = 1 << 16  # positions examined per numpy pass while resynchronising (~36 bytes of scratch each)
_LOOP_RECORDS = 48  # records followed one by one before predicting the next ones
_MAX_LOOP_RECORDS = 3072  # the most, after patterns failed to show up
_MAX_CYCLE = 16  # longest repeating pattern of record sizes looked for
_CYCLE_SAMPLE = 48  # recent records a pattern must explain
_FIRST_PREDICTION = 64  # cycles predicted in the first window
_PREDICTED_RECORDS = 1 << 18  # most records predicted per numpy pass
_MAX_LONG_CYCLE = 1 << 14  # longest cycle made of a stretch and the odd record after it


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
    return (rotated.astype(np.uint64) + MASK_DELTA).astype(np.uint32)


def read_uint_at(raw: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    """Little-endian unsigned integers of `width` (4 or 8) bytes at arbitrary offsets, in one gather."""
    if offsets.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64 if width == 8 else np.uint32)
    windows = np.lib.stride_tricks.as_strided(raw, shape=(raw.shape[0] - width + 1, width), strides=(1, 1))
    return np.ascontiguousarray(windows[offsets]).view("<u8" if width == 8 else "<u4").reshape(-1)


def _gather_u32(raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return read_uint_at(raw, offsets, 4)


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


def _frame_loop(buf: bytes, pos: int, max_records: int) -> tuple[list[int], int, bool]:
    """Follow length fields one by one: (header offsets, stop position, reached the buffer's end)."""
    end_of_buffer = len(buf)
    read_length = int.from_bytes
    headers: list[int] = []
    append = headers.append
    while pos + HEADER_BYTES <= end_of_buffer:
        if len(headers) == max_records:
            return headers, pos, False
        end = pos + FRAME_BYTES + read_length(buf[pos : pos + 8], "little")
        if end > end_of_buffer:
            break
        append(pos)
        pos = end
    return headers, pos, True


def _size_cycle(headers: list[int], stop: int) -> np.ndarray | None:
    """The shortest pattern of record sizes that the recent records repeat throughout, if any."""
    sizes = np.diff(np.asarray([*headers[-_CYCLE_SAMPLE:], stop], dtype=np.int64))
    for period in range(1, min(_MAX_CYCLE, sizes.shape[0] // 3) + 1):
        if np.array_equal(sizes[period:], sizes[:-period]):
            return sizes[-period:]
    return None


def _frame_predicted(raw: np.ndarray, pos: int, cycle: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Assume the size cycle goes on; keep the predicted headers up to the first wrong length.

    Predictions are checked in windows that double while they hold, so a pattern that breaks
    early costs little. A record of another size after a stretch that followed the cycle at
    least once through (an evaluation or a per-layer record every hundred steps) is stepped
    over with its own length field, and the cycle predicted on from where it stopped; when two
    such stretches in a row are alike (same length, same odd record after), the stretch and its
    odd record become the cycle, so a log that logs something extra every N steps is framed in
    a few numpy passes per chunk, not one per odd record.
    """
    kept_parts: list[np.ndarray] = []
    window = _FIRST_PREDICTION
    phase = 0  # where in the cycle the next record is
    stretch: tuple[int, int] = (0, 0)  # (phase it began at, records) since the last odd record
    last_odd: tuple[int, int, int] | None = None  # (phase, records, odd record's size) of the stretch before
    while True:
        period = cycle.shape[0]
        sizes_ahead = np.roll(cycle, -phase) if phase else cycle
        repeats = max(1, min(window, (raw.shape[0] - pos) // int(cycle.sum()) + 1))
        sizes = np.tile(sizes_ahead, repeats)
        offsets = pos + np.concatenate([[0], np.cumsum(sizes[:-1])])
        inside = offsets + sizes <= raw.shape[0]
        offsets, sizes = offsets[inside], sizes[inside]
        if offsets.shape[0] == 0:
            return kept_parts, pos
        stored = read_uint_at(raw, offsets, 8)
        wrong = np.flatnonzero(stored != (sizes - FRAME_BYTES).astype(np.uint64))
        kept = int(wrong[0]) if wrong.size else offsets.shape[0]
        if kept:
            kept_parts.append(offsets[:kept])
            pos = int(offsets[kept - 1] + sizes[kept - 1])
        stretch = (stretch[0], stretch[1] + kept)
        if kept == offsets.shape[0]:
            if not np.all(inside):
                return kept_parts, pos
            window = min(2 * window, _PREDICTED_RECORDS // period)
            continue
        # `pos` (= offsets[kept]) is a record boundary whose length differs from the cycle's.
        odd_size = FRAME_BYTES + int(stored[kept])
        if stretch[1] < period or pos + odd_size > raw.shape[0]:
            return kept_parts, pos  # the pattern itself changed, or the record is not whole: the loop decides
        kept_parts.append(np.asarray([pos], dtype=np.int64))
        pos += odd_size
        phase = (phase + kept) % period
        odd = (*stretch, odd_size)
        if odd == last_odd and stretch[1] + 1 <= _MAX_LONG_CYCLE:
            regular = np.tile(np.roll(cycle, -stretch[0]), stretch[1] // period + 1)[: stretch[1]]
            cycle, phase, window, last_odd = np.append(regular, odd_size), 0, 2, None
        else:
            last_odd = odd
            window = max(_FIRST_PREDICTION, min(2 * (stretch[1] // period + 1), _PREDICTED_RECORDS // period))
        stretch = (phase, 0)


def _frame_unchecked(buf: bytes, raw: np.ndarray, pos: int) -> tuple[np.ndarray, int]:
    """Header offsets of the whole records from `pos` on, and where they stop. Nothing is checked.

    Logs repeat a short cycle of record sizes (the same tags every step), so after a few records
    followed one by one, the boundaries of the following ones are predicted for the whole cycle
    and verified against their length fields with numpy; a wrong prediction falls back to the loop.
    """
    parts: list = []
    loop_records = _LOOP_RECORDS
    while True:
        headers, pos, at_end = _frame_loop(buf, pos, loop_records)
        parts.append(headers)
        if at_end:
            break
        cycle = _size_cycle(headers, pos)
        if cycle is None:  # no pattern (say, histograms between scalars): look less often
            loop_records = min(2 * loop_records, _MAX_LOOP_RECORDS)
            continue
        loop_records = _LOOP_RECORDS
        predicted, pos = _frame_predicted(raw, pos, cycle)
        parts.extend(predicted)
    return np.concatenate([np.asarray(part, dtype=np.int64) for part in parts]), pos


def _next_valid_header(raw: np.ndarray, pos: int) -> int | None:
    """The first position at or after `pos` whose header checksum is valid, if any."""
    last_start = raw.shape[0] - HEADER_BYTES
    while pos <= last_start:
        candidates = np.arange(pos, min(pos + RESYNC_WINDOW, last_start + 1), dtype=np.int64)
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
        headers, stop = _frame_unchecked(buf, raw, pos)
        ends = np.append(headers[1:], stop) if headers.shape[0] else headers
        checked = np.append(headers, stop) if stop + HEADER_BYTES <= len(buf) else headers
        bad_headers = np.flatnonzero(~header_crc_ok(raw, checked))  # includes the record we stopped at
        usable = min(int(bad_headers[0]) if bad_headers.size else headers.shape[0], headers.shape[0])
        starts_arr = headers[:usable] + HEADER_BYTES
        lengths_arr = ends[:usable] - FOOTER_BYTES - starts_arr
        crc = google_crc32c.value
        payload_ends = (starts_arr + lengths_arr).tolist()
        crcs = [crc(buf[start:end]) for start, end in zip(starts_arr.tolist(), payload_ends, strict=True)]
        stored = _gather_u32(raw, starts_arr + lengths_arr)
        payload_ok = mask_crc(np.asarray(crcs, dtype=np.uint32)) == stored
        bad_payloads = np.flatnonzero(~payload_ok)
        if bad_payloads.size:
            # The length may be what lies (its own checksum can be valid): trust nothing past
            # this header and resynchronise from the byte after it, which also finds the next
            # record when only the payload was damaged.
            first = int(bad_payloads[0])
            all_starts.append(starts_arr[:first])
            all_lengths.append(lengths_arr[:first])
            skipped += 1
            pos = int(headers[first]) + 1
            resyncing = True
            continue
        all_starts.append(starts_arr)
        all_lengths.append(lengths_arr)
        if not bad_headers.size:
            pos = stop
            break
        skipped += 1
        pos = int(checked[bad_headers[0]]) + 1
        resyncing = True
    return RecordScan(
        starts=np.concatenate(all_starts) if all_starts else np.zeros(0, np.int64),
        lengths=np.concatenate(all_lengths) if all_lengths else np.zeros(0, np.int64),
        consumed=pos,
        skipped=skipped,
        resyncing=resyncing,
    )
