"""Serialized TensorBoard `Event`s of scalars and histograms, built without protobuf's objects.

MindSpore makes protobuf use its pure-Python backend in a training process, where building and
serialising one `Event` of a collection step's 34 scalars took 910 us and the same bytes built
here 28 us (`bench/bench_logger_host.py` measures the callback as a whole). These are the only
two shapes the hooks write at every collection step; everything else (texts, graphs, the file
version) still goes through TensorBoard's protos.

The wire format is protobuf's (https://protobuf.dev/programming-guides/encoding/), for the
fields of TensorBoard's `event.proto` and `summary.proto` that these events use:

    Event:          wall_time = 1 (double), step = 2 (int64), summary = 5 (Summary)
    Summary:        value = 1 (repeated Value)
    Summary.Value:  tag = 1 (string), simple_value = 2 (float), histo = 5 (HistogramProto)
    HistogramProto: min = 1, max = 2, num = 3, sum = 4, sum_squares = 5 (double),
                    bucket_limit = 6, bucket = 7 (packed repeated double)

Fields are written in field-number order and proto3 scalars at their default (0) are left out,
as protobuf does; `simple_value` and `histo` belong to a `oneof`, so they are written even at 0.
`tests/test_event_bytes.py` checks the bytes against TensorBoard's protos.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import numpy as np

_WALL_TIME = b"\x09"  # field 1, 64-bit
_STEP = b"\x10"  # field 2, varint
_SUMMARY = b"\x2a"  # field 5, length-delimited
_VALUE = b"\x0a"  # Summary.value: field 1, length-delimited
_SIMPLE_VALUE = b"\x15"  # Value.simple_value: field 2, 32-bit
_HISTO = b"\x2a"  # Value.histo: field 5, length-delimited
_HISTO_SCALARS = (b"\x09", b"\x11", b"\x19", b"\x21", b"\x29")  # min, max, num, sum, sum_squares: 64-bit
_BUCKET_LIMIT = b"\x32"  # field 6, packed doubles
_BUCKET = b"\x3a"  # field 7, packed doubles


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(key: bytes, payload: bytes) -> bytes:
    return key + varint(len(payload)) + payload


@functools.lru_cache(maxsize=4096)
def _tag_field(tag: str) -> bytes:
    """`Value.tag` as written (left out when empty, a proto3 default): the same few dozen tags
    come back at every collection step."""
    return _delimited(b"\x0a", tag.encode("utf-8")) if tag else b""


def _double(key: bytes, number: float) -> bytes:
    """A proto3 double field: left out at +0.0 only (protobuf writes -0.0)."""
    number = float(number)
    return b"" if number == 0 and not np.signbit(number) else key + struct.pack("<d", number)


def _event(step: int, wall_time: float, values: list[bytes]) -> bytes:
    head = _double(_WALL_TIME, wall_time)
    if step:
        head += _STEP + varint(int(step))
    return head + _delimited(_SUMMARY, b"".join(values))


def scalars_event(values: Sequence[tuple[str, float]], step: int, wall_time: float) -> bytes:
    """One `Event` whose `Summary` holds a `simple_value` per (tag, value), in order. Values are
    stored as float32, as `simple_value` is (beyond its range: +-inf, as protobuf does)."""
    with np.errstate(over="ignore"):
        packed = np.array([value for _, value in values], dtype=np.float64).astype("<f4").tobytes()
    fields = []
    for index, (tag, _) in enumerate(values):
        body = _tag_field(tag) + _SIMPLE_VALUE + packed[4 * index : 4 * index + 4]
        fields.append(_delimited(_VALUE, body))
    return _event(step, wall_time, fields)


def histogram_value(tag: str, low: float, high: float, num: float, total: float, sum_squares: float,
                    bucket_limit: np.ndarray, bucket: np.ndarray) -> bytes:
    """One `Summary.Value` holding a legacy `HistogramProto` (the Histograms tab's format)."""
    histo = b"".join(_double(key, number)
                     for key, number in zip(_HISTO_SCALARS, (low, high, num, total, sum_squares), strict=True))
    for key, array in ((_BUCKET_LIMIT, bucket_limit), (_BUCKET, bucket)):
        if len(array):
            histo += _delimited(key, np.ascontiguousarray(array, dtype="<f8").tobytes())
    return _delimited(_VALUE, _tag_field(tag) + _delimited(_HISTO, histo))


def histograms_event(values: list[bytes], step: int, wall_time: float) -> bytes:
    """One `Event` whose `Summary` holds the given `histogram_value`s."""
    return _event(step, wall_time, values)
