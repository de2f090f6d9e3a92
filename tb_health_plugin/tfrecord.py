"""TFRecord framing, the container of tfevents and MindSpore summary files alike:
`u64 length | u32 masked CRC32C(length) | payload | u32 masked CRC32C(payload)`, little-endian.

One definition for the readers (`readers/records.py` checks it, vectorised over a file's records)
and for the hooks' writer (which frames its records with it instead of TensorBoard's pure-Python
CRC), so reading and writing cannot drift apart.
"""

from __future__ import annotations

import struct

import google_crc32c

MASK_DELTA = 0xA282EAD8  # TFRecord's masking constant


def masked_crc(data: bytes) -> int:
    """The masked CRC32C of a byte string: rotated right by 15 bits, plus `MASK_DELTA`."""
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One record: the payload with its length, and both masked CRCs."""
    header = struct.pack("<Q", len(payload))
    return b"".join((header, struct.pack("<I", masked_crc(header)), payload, struct.pack("<I", masked_crc(payload))))
