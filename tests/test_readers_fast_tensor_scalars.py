"""Tensor-encoded scalars take the vectorised path and read exactly as the protobuf path reads them.

The oracle is the same decoder with both vectorised paths switched off (every record through
protobuf, as before they existed); everything a batch yields is compared: scalars bit for bit,
histograms, text, undecodable counts, the last wall time, and the plugin remembered per tag.
"""

from __future__ import annotations

import glob
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.scalar import summary_v2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_health_plugin.readers import LogdirReader, fast_scalars, fast_tensor_scalars, tfevents, wire
from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.records import scan_records
from tb_health_plugin.readers.tfevents import TfeventsDecoder
from tb_health_plugin.tfrecord import masked_crc

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19
NUMPY_TYPES = {DT_FLOAT: np.float32, DT_DOUBLE: np.float64, DT_INT32: np.int32, DT_INT64: np.int64,
               DT_HALF: np.float16, DT_BFLOAT16: np.uint16}
VALUE_FIELDS = {DT_FLOAT: "float_val", DT_DOUBLE: "double_val", DT_INT32: "int_val", DT_INT64: "int64_val",
                DT_HALF: "half_val", DT_BFLOAT16: "half_val"}


# --- helpers -------------------------------------------------------------------------------------

def frame(payload: bytes) -> bytes:
    header = len(payload).to_bytes(8, "little")
    return header + masked_crc(header).to_bytes(4, "little") + payload + masked_crc(payload).to_bytes(4, "little")


def scalar_metadata(plugin: str = "scalars", **fields) -> SummaryMetadata:
    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=plugin, content=fields.pop("content", b"")),
                           **fields)


def number_tensor(dtype: int, number, layout: str, shape: list[int] | None) -> TensorProto:
    """One number as a TensorProto: in its repeated `*_val` field, or as `tensor_content` (TF2's C++ writer)."""
    tensor = TensorProto(dtype=dtype)
    if shape is not None:
        tensor.tensor_shape.CopyFrom(TensorShapeProto(dim=[TensorShapeProto.Dim(size=size) for size in shape]))
    stored = np.asarray(number).astype(NUMPY_TYPES[dtype])
    if layout == "content":
        tensor.tensor_content = stored.tobytes()
    elif dtype in (DT_HALF, DT_BFLOAT16):
        tensor.half_val.append(int(stored.view(np.uint16)))
    else:
        getattr(tensor, VALUE_FIELDS[dtype]).append(stored.item())
    return tensor


def no_points() -> ScalarPoints:
    return ScalarPoints([], *(np.zeros(0, dtype) for dtype in (np.int64,) * 3 + (np.float64,) * 2))


def decode_in_batches(data: bytes, cuts: list[int], vectorised: bool, monkeypatch) -> tuple[list, TfeventsDecoder]:
    """Decode the records of `data` in consecutive batches split at `cuts`, with or without the
    vectorised paths."""
    with monkeypatch.context() as patch:
        if not vectorised:
            patch.setattr(fast_tensor_scalars, "decode_tensor_scalars", lambda raw, starts, lengths:
                          fast_tensor_scalars.FastTensorScalars(np.zeros(starts.shape[0], bool), no_points(), np.zeros(0, bool)))
            patch.setattr(fast_scalars, "decode_simple_values", lambda raw, starts, lengths:
                          fast_scalars.FastScalars(np.zeros(starts.shape[0], bool), no_points()))
        scan = scan_records(data)
        raw = np.frombuffer(data, np.uint8)
        decoder = TfeventsDecoder()
        edges = [0, *sorted(c for c in set(cuts) if 0 < c < scan.starts.shape[0]), scan.starts.shape[0]]
        batches = [decoder.decode(raw, scan.starts[a:b], scan.lengths[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return batches, decoder


def bits(array) -> list:
    """Bit patterns, -0.0 told from 0.0; NaN as one NaN (protobuf's pure-python backend, which the
    suite runs on, drops NaN payloads the vectorised path keeps)."""
    numbers = np.asarray(array, np.float64).copy()
    numbers[np.isnan(numbers)] = math.nan
    return numbers.view(np.uint64).tolist()


def summarise(batch) -> dict:
    scalars = {tag: (steps.tolist(), bits(walls), bits(values)) for tag, steps, walls, values in batch.scalars_by_tag()}
    histograms = [(p.tag, p.order, p.step, p.wall_time, p.buckets.tolist()) for p in batch.histograms]
    texts = [(p.tag, p.order, p.step, p.wall_time, p.text) for p in batch.texts]
    return {"scalars": scalars, "histograms": histograms, "texts": texts, "undecodable": batch.undecodable,
            "last_wall_time": batch.last_wall_time}


def assert_same_reading(data: bytes, monkeypatch, cuts: list[int] = ()) -> list:
    ours, our_decoder = decode_in_batches(data, list(cuts), True, monkeypatch)
    theirs, their_decoder = decode_in_batches(data, list(cuts), False, monkeypatch)
    assert [summarise(b) for b in ours] == [summarise(b) for b in theirs]
    assert our_decoder.plugin_by_tag == their_decoder.plugin_by_tag
    return ours


def records_given_to_protobuf(data: bytes, monkeypatch) -> int:
    """How many records the vectorised decoder hands to protobuf."""
    handed: list[int] = []
    real = tfevents.parse_events

    def counting(batch_class, raw, starts, lengths):
        handed.append(int(starts.shape[0]))
        return real(batch_class, raw, starts, lengths)

    with monkeypatch.context() as patch:
        patch.setattr(tfevents, "parse_events", counting)
        decode_in_batches(data, [], True, monkeypatch)
    return sum(handed)


def write_with_tensorboard(folder: Path, events: list[Event]) -> bytes:
    writer = EventFileWriter(str(folder))
    for item in events:
        writer.add_event(item)
    writer.close()
    (path,) = glob.glob(str(folder / "*tfevents*"))
    return Path(path).read_bytes()


# --- the writers' own layouts ------------------------------------------------------------------------

def tf2_value(tag: str, number: float, first: bool) -> Summary.Value:
    """TF2's `tf.summary.scalar` (Keras, Flax/CLU): float32 tensor_content, metadata on the tag's first write."""
    value = Summary.Value(tag=tag, tensor=number_tensor(DT_FLOAT, number, "content", []))
    if first:
        value.metadata.CopyFrom(scalar_metadata())
    return value


def torch_value(tag: str, number: float, double: bool = False) -> Summary.Value:
    """torch.utils.tensorboard `add_scalar(new_style=True)`: float_val (or double_val), no shape, metadata each time."""
    tensor = TensorProto(dtype=DT_DOUBLE if double else DT_FLOAT)
    (tensor.double_val if double else tensor.float_val).append(number)
    return Summary.Value(tag=tag, tensor=tensor, metadata=scalar_metadata())


def writers_events(steps: int) -> list[Event]:
    rng = np.random.default_rng(0)
    events = []
    for step in range(steps):
        numbers = rng.normal(size=6)
        numbers[0] = np.nan if step == 7 else numbers[0]
        numbers[1] = np.inf if step == 9 else numbers[1]
        for summary in (
            summary_v2.scalar_pb("v2/loss", numbers[0], description="the loss" if step == 0 else None),
            Summary(value=[tf2_value("tf2/loss", numbers[1], step == 0)]),
            Summary(value=[tf2_value("tf2/lr", numbers[2], step == 0)]),
            Summary(value=[torch_value("torch/loss", numbers[3])]),
            Summary(value=[torch_value("torch/loss64", numbers[4], double=True)]),
            Summary(value=[Summary.Value(tag="legacy/loss", simple_value=numbers[5])]),
            Summary(value=[Summary.Value(tag="int/epoch", tensor=tensor_util.make_tensor_proto(np.int64(step // 3)))]),
        ):
            events.append(Event(step=step, wall_time=1.7e9 + step, summary=summary))
    return events


def test_every_common_writers_tensor_scalars_take_the_vectorised_path(tmp_path, monkeypatch):
    data = write_with_tensorboard(tmp_path, writers_events(200))
    assert records_given_to_protobuf(data, monkeypatch) == 1  # only the file_version event
    (batch,) = assert_same_reading(data, monkeypatch)
    got = summarise(batch)["scalars"]
    assert sorted(got) == sorted(["v2/loss", "tf2/loss", "tf2/lr", "torch/loss", "torch/loss64", "legacy/loss", "int/epoch"])
    assert all(len(steps) == 200 for steps, _walls, _values in got.values())
    assert math.isnan(np.asarray(got["v2/loss"][2], np.uint64).view(np.float64)[7])


def test_metadata_on_the_first_event_only_is_remembered_across_batches_and_files(tmp_path, monkeypatch):
    first = write_with_tensorboard(tmp_path / "a", [Event(step=s, wall_time=s, summary=Summary(value=[tf2_value("x", s, s == 0)]))
                                                     for s in range(50)])
    second = write_with_tensorboard(tmp_path / "b", [Event(step=s, wall_time=s, summary=Summary(value=[tf2_value("x", s, False)]))
                                                      for s in range(50, 80)])
    data = first + second
    batches = assert_same_reading(data, monkeypatch, cuts=[1, 2, 30, 51])
    assert sum(len(summarise(b)["scalars"].get("x", ([],))[0]) for b in batches) == 80
    reader = LogdirReader(tmp_path)
    reader.refresh()
    assert [len(reader.run(name).scalars["x"]) for name in reader.run_names()] == [50, 30]


def test_a_tag_another_plugin_claimed_is_read_as_that_plugin_says(monkeypatch):
    """A text tag whose later values are one-number tensors stays text: the order of records matters."""
    events = [
        Event(step=0, wall_time=1, summary=Summary(value=[Summary.Value(tag="note", tensor=tensor_util.make_tensor_proto(np.array(["hello"])),
                                                                        metadata=scalar_metadata("text"))])),
        *[Event(step=s, wall_time=1 + s, summary=Summary(value=[tf2_value("note", s, False)])) for s in range(1, 5)],
        Event(step=5, wall_time=9, summary=Summary(value=[tf2_value("note", 5.0, True)])),  # now it says scalars
        Event(step=6, wall_time=9, summary=Summary(value=[tf2_value("note", 6.0, False)])),
    ]
    data = b"".join(frame(e.SerializeToString()) for e in events)
    for cuts in ([], [1], [3], [5, 6]):
        batches = assert_same_reading(data, monkeypatch, cuts)
        assert [p.text for b in batches for p in b.texts] == ["hello", "1.0", "2.0", "3.0", "4.0"]
        scalars = [s for b in batches for s in summarise(b)["scalars"].get("note", ([],))[0]]
        assert scalars == [5, 6]


# --- generated events: every layout, dtype, step and value ----------------------------------------

tags = st.one_of(st.sampled_from(["loss", "lr", "train/grad_norm", "note"]), st.text(min_size=1, max_size=140))
steps = st.one_of(st.just(0), st.integers(1, 1000), st.integers(-(2**63), 2**63 - 1), st.just(2**63 - 1))
walls = st.one_of(st.floats(0, 2e9), st.floats(allow_nan=True, allow_infinity=True))
dtypes = st.sampled_from([DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF, DT_BFLOAT16])


@st.composite
def numbers_for(draw, dtype: int):
    if dtype in (DT_INT32,):
        return draw(st.integers(-(2**31), 2**31 - 1))
    if dtype == DT_INT64:
        return draw(st.integers(-(2**63), 2**63 - 1))
    if dtype == DT_BFLOAT16:
        return draw(st.integers(0, 2**16 - 1))
    width = {DT_FLOAT: 32, DT_DOUBLE: 64, DT_HALF: 16}[dtype]
    return draw(st.one_of(st.floats(width=width), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0])))


metadatas = st.one_of(
    st.none(),
    st.just(scalar_metadata()),
    st.builds(lambda display, description, content, data_class: scalar_metadata(
        display_name=display, summary_description=description, content=content, data_class=data_class),
        st.text(max_size=20), st.text(max_size=200), st.binary(max_size=4), st.integers(0, 3)),
    st.sampled_from(["text", "histograms", "images", ""]).map(scalar_metadata),
)


@st.composite
def tensor_scalar_values(draw) -> Summary.Value:
    dtype = draw(dtypes)
    shape = draw(st.sampled_from([None, [], [1], [1, 1], [2]]))
    layout = draw(st.sampled_from(["field", "content"]))
    value = Summary.Value(tag=draw(tags), tensor=number_tensor(dtype, draw(numbers_for(dtype)), layout, shape))
    metadata = draw(metadatas)
    if metadata is not None:
        value.metadata.CopyFrom(metadata)
    return value


other_values = st.one_of(
    st.builds(lambda tag, number: Summary.Value(tag=tag, simple_value=number), tags, st.floats(width=32)),
    st.builds(lambda tag, text: Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(np.array([text]))), tags, st.text(max_size=5)),
    st.builds(lambda tag, rows: Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(np.asarray(rows, np.float64).reshape(-1, 3))),
              tags, st.lists(st.floats(-10, 10), min_size=3, max_size=9).map(lambda xs: xs[: len(xs) // 3 * 3])),
)


@st.composite
def records(draw) -> bytes:
    values = draw(st.one_of(st.lists(tensor_scalar_values(), min_size=1, max_size=1),
                            st.lists(st.one_of(tensor_scalar_values(), other_values), min_size=0, max_size=3)))
    payload = Event(step=draw(steps), wall_time=draw(walls), summary=Summary(value=values)).SerializeToString()
    for _ in range(draw(st.integers(0, 2)) if draw(st.booleans()) else 0):  # near-valid damage: one byte changed
        at = draw(st.integers(0, len(payload) - 1))
        payload = payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1 :]
    return frame(payload)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(records(), min_size=1, max_size=30), st.lists(st.integers(0, 30), max_size=3))
def test_generated_tensor_scalars_read_as_protobuf_reads_them(monkeypatch, generated, cuts):
    assert_same_reading(b"".join(generated), monkeypatch, cuts)


@pytest.mark.parametrize("dtype", [DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF])
@pytest.mark.parametrize("layout", ["field", "content"])
@pytest.mark.parametrize("shape", [None, [], [1]])
@pytest.mark.parametrize("step", [0, 1, 2**62])
def test_each_layout_is_vectorised(monkeypatch, dtype, layout, shape, step):
    values = [Summary.Value(tag="t", tensor=number_tensor(dtype, number, layout, shape)) for number in (0, 1, 3, 2)]
    values[0].metadata.CopyFrom(scalar_metadata(summary_description="what it is", data_class=1))
    data = b"".join(frame(Event(step=step + i, wall_time=1e9 + i, summary=Summary(value=[v])).SerializeToString())
                    for i, v in enumerate(values))
    assert records_given_to_protobuf(data, monkeypatch) == 0
    (batch,) = assert_same_reading(data, monkeypatch)
    ((tag, got_steps, _walls, got_values),) = batch.scalars_by_tag()
    assert got_steps.tolist() == [step, step + 1, step + 2, step + 3]
    assert got_values.tolist() == [0.0, 1.0, 3.0, 2.0]


def test_what_is_not_vectorised_still_reads(monkeypatch):
    """bfloat16 (which TensorBoard's make_ndarray cannot read), negative ints (10-byte varints),
    a negative step, non-ASCII descriptions: protobuf reads them, as before."""
    values = [
        Summary.Value(tag="bf16", tensor=number_tensor(DT_BFLOAT16, 0x3F80, "field", [])),
        Summary.Value(tag="neg", tensor=number_tensor(DT_INT32, -5, "field", [])),
        Summary.Value(tag="desc", tensor=number_tensor(DT_FLOAT, 2.5, "field", []), metadata=scalar_metadata(summary_description="损失")),
    ]
    data = b"".join(frame(Event(step=-3, wall_time=1.0, summary=Summary(value=[v])).SerializeToString()) for v in values)
    (batch,) = assert_same_reading(data, monkeypatch)
    got = summarise(batch)["scalars"]
    assert sorted(got) == ["desc", "neg"]
    assert batch.undecodable == 1
    assert struct.pack("<d", 2.5) == struct.pack("<Q", got["desc"][2][0])


@pytest.mark.parametrize("field", ["display_name", "summary_description"])
def test_a_metadata_string_that_is_not_utf8_is_left_to_protobuf(monkeypatch, field):
    """Protobuf rejects the whole record (strings must be UTF-8): the vectorised path must not read it."""
    good = Summary.Value(tag="x", tensor=number_tensor(DT_FLOAT, 1.0, "field", []),
                         metadata=scalar_metadata(**{field: "PLACEHOLDER"}))
    payload = Event(step=1, wall_time=1.0, summary=Summary(value=[good])).SerializeToString()
    data = frame(payload.replace(b"PLACEHOLDER", b"PLACE\xff\xfeLDER")) + frame(payload)
    (batch,) = assert_same_reading(data, monkeypatch)
    assert batch.undecodable == 1
    assert len(summarise(batch)["scalars"]["x"][0]) == 1


def test_tags_whose_hashes_collide_are_still_told_apart(monkeypatch):
    """The tag table groups tags by a hash of their bytes; equal hashes of different tags fall back
    to comparing the bytes. A zero multiplier makes every 16-byte tag hash to its last 8 bytes."""
    names = [b"aaaaaaaa/metric1", b"bbbbbbbb/metric1", b"aaaaaaaa/metric1", b"cccccccc/metric2"]
    raw = np.frombuffer(b"".join(names), np.uint8)
    starts, lengths = np.arange(4, dtype=np.int64) * 16, np.full(4, 16, np.int64)
    expected = wire.tag_table(raw, starts, lengths)
    monkeypatch.setattr(wire, "_HASH_MULTIPLIER", np.uint64(0))
    tags, ids, utf8_ok = wire.tag_table(raw, starts, lengths)
    assert [tags[i] for i in ids.tolist()] == [name.decode() for name in names]
    assert tags == expected[0] == sorted(tags)
    assert utf8_ok.all()
