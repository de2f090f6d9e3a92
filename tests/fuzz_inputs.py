"""Hypothesis strategies and checks shared by the fuzz tests and the longer fuzz campaign.

- `mindspore_events`: MindSpore summary events built field by field over the whole range of each
  field (tags of any bytes, UTF-8 or not; floats including NaN and +-inf; int64 counts and steps
  at both ends; tensors with any dims and data), serialised with the schema's wire format.
- `framing_plans`: the good records of a seed file interleaved with framing damage: a header
  whose checksum is valid but whose length runs past the end of the file, a header with a bad
  checksum, a record with a bad payload checksum, raw garbage.

The checks say what must hold whatever the input: nothing raises, every good record is read, the
run's data can be analysed and sent as JSON.
"""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from tb_health_plugin.readers.schema import MS_RAW_BUCKETS_PACKAGE, MsBucket, _message_class
from tb_health_plugin.tfrecord import frame, masked_crc

# The reader's own schema variant: the same wire format, tags as bytes, so any tag can be written.
RawMsEvent = _message_class(f"{MS_RAW_BUCKETS_PACKAGE}.Event")
GENERATED_TAG_PREFIX = b"gen/"  # generated tags never collide with a seed's, so seeds stay checkable

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
ANY_DOUBLE = st.floats(allow_nan=True, allow_infinity=True)
ANY_FLOAT32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
TAG_BYTES = st.one_of(st.binary(max_size=12), st.text(max_size=8).map(str.encode)).map(GENERATED_TAG_PREFIX.__add__)


def header(length: int) -> bytes:
    """A header whose checksum is valid, whatever the length says."""
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc(raw))


@st.composite
def _histogram(draw, value) -> None:
    histogram = value.histogram
    for _ in range(draw(st.integers(0, 4))):
        histogram.buckets.append(
            MsBucket(left=draw(ANY_DOUBLE), width=draw(ANY_DOUBLE), count=draw(INT64)).SerializeToString())
    for name in ("nan_count", "pos_inf_count", "neg_inf_count", "count"):
        if draw(st.booleans()):
            setattr(histogram, name, draw(INT64))
    for name in ("max", "min", "sum"):
        if draw(st.booleans()):
            setattr(histogram, name, draw(ANY_DOUBLE))


@st.composite
def _tensor(draw, value) -> None:
    tensor = value.tensor
    tensor.dims.extend(draw(st.lists(st.one_of(st.integers(-2, 4), INT64), max_size=3)))
    tensor.data_type = draw(st.integers(-1, 50))
    column = draw(st.sampled_from(["float_data", "double_data", "int32_data", "int64_data", "uint64_data"]))
    element = {"float_data": ANY_FLOAT32, "double_data": ANY_DOUBLE, "int32_data": st.integers(-(2**31), 2**31 - 1),
               "int64_data": INT64, "uint64_data": UINT64}[column]
    getattr(tensor, column).extend(draw(st.lists(element, max_size=40)))


@st.composite
def mindspore_events(draw) -> bytes:
    """One serialised MindSpore summary event with 0 to 4 values of any kind."""
    event = RawMsEvent(wall_time=draw(ANY_DOUBLE))
    if draw(st.booleans()):
        event.step = draw(INT64)
    if draw(st.integers(0, 9)) == 0:
        event.version = draw(st.text(max_size=20))
        return event.SerializeToString()
    for _ in range(draw(st.integers(0, 4))):
        value = event.summary.value.add(tag=draw(TAG_BYTES))
        kind = draw(st.sampled_from(["scalar", "histogram", "tensor", "empty"]))
        if kind == "scalar":
            value.scalar_value = draw(ANY_FLOAT32)
        elif kind == "histogram":
            draw(_histogram(value))
        elif kind == "tensor":
            draw(_tensor(value))
    return event.SerializeToString()


# ----- framing damage around good records

GOOD, LYING, BAD_HEADER, BAD_PAYLOAD, GARBAGE = "good", "lying", "bad header", "bad payload", "garbage"


@st.composite
def framing_plans(draw, record_count: int) -> list[tuple[str, object]]:
    """Every good record once, in order, with damage pieces between them (each `(kind, detail)`)."""
    plan: list[tuple[str, object]] = []
    for index in range(record_count):
        if draw(st.integers(0, 7)) == 0:
            kind = draw(st.sampled_from([LYING, BAD_HEADER, BAD_PAYLOAD, GARBAGE]))
            if kind == LYING:
                detail = (draw(st.one_of(st.integers(1 << 32, 2**64 - 1), st.just(2**63))), draw(st.binary(max_size=80)))
            elif kind == BAD_HEADER:
                detail = draw(st.binary(min_size=12, max_size=40))
            elif kind == BAD_PAYLOAD:
                detail = draw(st.binary(min_size=1, max_size=60))
            else:
                detail = draw(st.binary(min_size=1, max_size=50))
            plan.append((kind, detail))
        plan.append((GOOD, index))
    return plan


def build_framing(plan: list[tuple[str, object]], records: list[bytes]) -> bytes:
    """The file a plan describes; `records` are the seed's framed good records."""
    parts = []
    for kind, detail in plan:
        if kind == GOOD:
            parts.append(records[detail])
        elif kind == LYING:
            length, garbage = detail
            parts.append(header(length) + garbage)
        elif kind == BAD_HEADER:
            raw = bytearray(header(len(detail)) + detail)
            raw[8] ^= 0xFF  # the length's checksum no longer matches
            parts.append(bytes(raw))
        elif kind == BAD_PAYLOAD:
            raw = bytearray(frame(detail))
            raw[-1] ^= 0xFF
            parts.append(bytes(raw))
        else:
            parts.append(detail)
    return b"".join(parts)
