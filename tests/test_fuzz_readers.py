"""The readers survive arbitrary bytes: truncated, bit-flipped, random and adversarial event files.

Besides byte-level damage, two property-based families (strategies in `fuzz_inputs.py`, shared
with the longer campaign `bench/bench_fuzz_readers.py`): MindSpore summary events built field by
field over each field's whole range, and the record framing (valid sequences of any record sizes;
lying lengths, bad checksums and garbage between good records, read whole, in small chunks and
as the file grows).

For tfevents and MindSpore summary files alike, no input may raise out of the reader, hang, or make
it allocate more than a small multiple of the file's size (tracemalloc), and every good record
around a bad one must still be read. Seeds are real files: tfevents written by TensorBoard's
`EventFileWriter`; MindSpore summaries framed like `SummaryRecord` writes them, with the message
schema that `test_readers_mindspore.py` checks against MindSpore's own.
"""

from __future__ import annotations

import faulthandler
import os
import struct
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from google.protobuf.internal import api_implementation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.readers.records import scan_records
from tb_health_plugin.readers.schema import MsEvent
from tb_health_plugin.tfrecord import masked_crc
from tests import fuzz_inputs
from tests.readers_fixtures import event, legacy_histogram_value, scalar_value, tensor_value, write_events

TFEVENTS_NAME = "events.out.tfevents.1767000000.fuzzhost"
MINDSPORE_NAME = "events.out.events.summary.1767000000.0.fuzzhost_MS"
SEED_STEPS = 60
# Reading a file may cost a fixed overhead (numpy scratch, protobuf objects, the run's columns)
# plus a small multiple of its size; anything beyond is a length field or shape believed.
MEMORY_FIXED_BYTES = 2 << 20
MEMORY_PER_FILE_BYTE = 8
SECONDS_PER_INPUT = 10.0  # generous on 2 busy cores; a hang trips the watchdog below
WATCHDOG_S = 900  # a hang, not a slow machine: the module takes about 60 CPU s, up to minutes on shared cores

tried: Counter = Counter()  # inputs fed to the reader, per test, printed at the end
worst = {"ratio": 0.0, "peak": 0, "size": 0, "seconds": 0.0}  # for the printed summary


@pytest.fixture(scope="module", autouse=True)
def report_inputs_tried():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)  # a hang fails loudly, not forever
    yield
    faulthandler.cancel_dump_traceback_later()
    print(f"\nfuzz_readers: {sum(tried.values())} inputs tried (protobuf backend {api_implementation.Type()}): "
          f"{dict(tried)}")
    print(f"fuzz_readers: worst peak {worst['peak']} B for {worst['size']} B (x{worst['ratio']:.1f} over a 64 KiB"
          f" floor), slowest input {worst['seconds']:.2f} s")


# ----- seeds: real files, each record holding one known point


Point = tuple[str, str, int]  # (kind, tag, step)


@dataclass(frozen=True)
class Seed:
    name: str  # the event file's name, which selects the format
    data: bytes
    records: list[tuple[int, int, frozenset]]  # (start offset, framed size, points it holds)

    def points_before(self, cut: int) -> set:
        return {p for start, size, pts in self.records if start + size <= cut for p in pts}

    def all_points(self) -> set:
        return {p for _, _, pts in self.records for p in pts}

    def record_at(self, offset: int) -> int:
        return next(i for i, (start, size, _) in enumerate(self.records) if start <= offset < start + size)


def frame(payload: bytes) -> bytes:
    """TFRecord framing, as TensorBoard's and MindSpore's writers lay it out."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


def split_records(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = 16 + int.from_bytes(data[pos : pos + 8], "little")
        out.append((pos, size))
        pos += size
    return out


LONG_TAG = "fuzz/" + "long" * 40  # longer than the vectorised path takes: decoded by protobuf


def _tfevents_point(step: int):
    kind = step % 5
    if kind == 0:
        return scalar_value("fuzz/loss", 1.0 / step), ("scalar", "fuzz/loss", step)
    if kind == 1:
        return scalar_value(LONG_TAG, float(step)), ("scalar", LONG_TAG, step)
    if kind == 2:
        return tensor_value("fuzz/lr", np.float32(0.1), "scalars"), ("scalar", "fuzz/lr", step)
    if kind == 3:
        data = np.linspace(-1, 1, 50) * step
        edges = np.linspace(data.min(), data.max() + 1e-9, 8)
        return legacy_histogram_value("fuzz/hist", data, edges), ("histogram", "fuzz/hist", step)
    return tensor_value("fuzz/text", np.array([f"note {step}".encode()], dtype=object), "text"), ("text", "fuzz/text", step)


def tfevents_seed(folder: Path) -> Seed:
    values, points = zip(*(_tfevents_point(step) for step in range(1, SEED_STEPS + 1)), strict=True)
    path = write_events(folder, [event(step, value) for step, value in zip(range(1, SEED_STEPS + 1), values, strict=True)])
    data = path.read_bytes()
    frames = split_records(data)
    assert len(frames) == SEED_STEPS + 1  # the file_version event, then one record per step
    records = [(frames[0][0], frames[0][1], frozenset())]
    records += [(start, size, frozenset([point])) for (start, size), point in zip(frames[1:], points, strict=True)]
    return Seed(TFEVENTS_NAME, data, records)


def _mindspore_event(step: int) -> tuple[bytes, Point]:
    ms_event = MsEvent(wall_time=1_767_000_000.0 + step, step=step)
    value = ms_event.summary.value.add()
    kind = step % 4
    if kind == 0:
        value.tag, value.scalar_value = "loss", 1.0 / step
        point = ("scalar", "loss", step)
    elif kind == 1:
        value.tag = "w"
        for left in range(5):
            value.histogram.buckets.add(left=float(left), width=1.0, count=step + left)
        value.histogram.nan_count = step % 3
        point = ("histogram", "w", step)
    elif kind == 2:
        value.tag = "lr"
        value.tensor.dims.append(1)
        value.tensor.data_type = 11
        value.tensor.float_data.append(0.5)
        point = ("scalar", "lr", step)
    else:
        value.tag = "t"
        value.tensor.dims.extend([2, 3])
        value.tensor.float_data.extend(np.arange(6, dtype=np.float32) * step)
        point = ("histogram", "t", step)
    return ms_event.SerializeToString(), point


def mindspore_seed() -> Seed:
    records, parts, pos = [], [], 0
    version = frame(MsEvent(wall_time=1_767_000_000.0, version="MindSpore.Event:1").SerializeToString())
    parts.append(version)
    records.append((0, len(version), frozenset()))
    pos = len(version)
    for step in range(1, SEED_STEPS + 1):
        payload, point = _mindspore_event(step)
        framed = frame(payload)
        records.append((pos, len(framed), frozenset([point])))
        parts.append(framed)
        pos += len(framed)
    return Seed(MINDSPORE_NAME, b"".join(parts), records)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Seed]:
    return {"tfevents": tfevents_seed(tmp_path_factory.mktemp("seed")), "mindspore": mindspore_seed()}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# ----- reading one input under watch


@dataclass
class Outcome:
    points: set
    skipped: int
    peak_bytes: int
    seconds: float
    run: object = None  # the RunData read, if the file made a run


def points_of(run) -> set:
    out = set()
    for kind, series_by_tag in (("scalar", run.scalars), ("histogram", run.histograms), ("text", run.texts)):
        for tag, series in series_by_tag.items():
            out.update((kind, tag, int(step)) for step in series.steps)
    return out


def read_bytes_as(scratch: Path, name: str, data: bytes, label: str, detail: str = "") -> Outcome:
    """Write `data` as the only event file of a run and read it; check time and memory."""
    run_dir = scratch / "run"
    run_dir.mkdir(exist_ok=True)
    for old in run_dir.iterdir():
        old.unlink()
    (run_dir / name).write_bytes(data)
    tried[label] += 1
    tracemalloc.start()
    started = time.perf_counter()
    reader = LogdirReader(run_dir)
    reader.refresh()
    names = reader.run_names()
    run = reader.run(".") if names else None
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert names in ([], ["."])
    assert seconds < SECONDS_PER_INPUT, f"{label} {detail}: {len(data)} bytes took {seconds:.1f} s"
    budget = MEMORY_FIXED_BYTES + MEMORY_PER_FILE_BYTE * len(data)
    assert peak <= budget, f"{label} {detail}: reading {len(data)} bytes peaked at {peak} bytes (budget {budget})"
    ratio = peak / max(len(data), 1 << 16)
    if ratio > worst["ratio"]:
        worst.update(ratio=ratio, peak=peak, size=len(data))
    worst["seconds"] = max(worst["seconds"], seconds)
    if run is None:
        return Outcome(set(), 0, peak, seconds)
    return Outcome(points_of(run), run.skipped_records, peak, seconds, run)


FORMATS = ["tfevents", "mindspore"]


def test_seeds_read_completely(seeds, scratch):
    for fmt in FORMATS:
        seed = seeds[fmt]
        outcome = read_bytes_as(scratch, seed.name, seed.data, "seed")
        assert outcome.points == seed.all_points() and outcome.skipped == 0
        assert len(outcome.points) == SEED_STEPS


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_truncation_keeps_every_whole_record_before_the_cut(seeds, scratch, fmt):
    seed = seeds[fmt]
    boundaries = {start + delta for start, _, _ in seed.records[::3] for delta in (-1, 0, 1, 11, 12)}
    cuts = sorted({c for c in boundaries | set(range(0, len(seed.data), 151)) if 0 <= c <= len(seed.data)})
    for cut in cuts:
        outcome = read_bytes_as(scratch, seed.name, seed.data[:cut], f"truncated {fmt}")
        assert outcome.points == seed.points_before(cut), f"cut at {cut}"
        assert outcome.skipped == 0, f"a cut record is a live writer's, not damage (cut at {cut})"


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_flipped_bit_loses_only_the_record_it_hits(seeds, scratch, fmt, data):
    seed = seeds[fmt]
    bit = data.draw(st.integers(0, 8 * len(seed.data) - 1))
    damaged = bytearray(seed.data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    hit = seed.record_at(bit // 8)
    outcome = read_bytes_as(scratch, seed.name, bytes(damaged), f"bit-flipped {fmt}")
    assert outcome.points == seed.all_points() - seed.records[hit][2]
    assert outcome.skipped >= 1


def _mutate(data: bytes, draw) -> tuple[bytes, int]:
    """A few random edits; returns the damaged bytes and the first offset they touch."""
    out = bytearray(data)
    first = len(out)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "overwrite", "delete", "insert", "duplicate", "truncate"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=16))
            out[at : at + len(chunk)] = chunk
        elif kind == "delete":
            del out[at : at + draw(st.integers(1, 40))]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "duplicate":
            out[at:at] = out[at : at + draw(st.integers(1, 200))]
        else:
            del out[at:]
        first = min(first, at)
    return bytes(out), first


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_edits_never_lose_the_records_before_the_damage(seeds, scratch, fmt, data):
    seed = seeds[fmt]
    damaged, first = _mutate(seed.data, data.draw)
    outcome = read_bytes_as(scratch, seed.name, damaged, f"edited {fmt}")
    assert seed.points_before(first) <= outcome.points


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_random_bytes_are_survived(seeds, scratch, fmt, data):
    read_bytes_as(scratch, seeds[fmt].name, data, f"random {fmt}")


# ----- valid framing around hostile payloads


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire_type: int, content: bytes | int) -> bytes:
    key = varint((number << 3) | wire_type)
    if wire_type == 0:
        return key + varint(int(content))
    if wire_type == 2:
        return key + varint(len(content)) + content
    return key + bytes(content)


# Protobuf-shaped payloads with arbitrary field numbers and wire types: wrong types for the
# Event's fields (a varint where the summary belongs, bytes where the wall time is, ...).
protobuf_like = st.recursive(
    st.just(b""),
    lambda inner: st.lists(
        st.one_of(
            st.builds(field, st.integers(1, 12), st.just(0), st.integers(0, 2**64 - 1)),
            st.builds(field, st.integers(1, 12), st.just(1), st.binary(min_size=8, max_size=8)),
            st.builds(field, st.integers(1, 12), st.just(5), st.binary(min_size=4, max_size=4)),
            st.builds(field, st.integers(1, 12), st.just(2), st.one_of(inner, st.binary(max_size=24))),
        ),
        max_size=5,
    ).map(b"".join),
    max_leaves=12,
)
hostile_payloads = st.one_of(st.binary(max_size=200), protobuf_like)


def with_inserted_records(seed: Seed, inserts: dict[int, list[bytes]]) -> bytes:
    """The seed with framed `payloads` inserted before record `i` for each `i` in `inserts`."""
    parts = []
    for index, (start, size, _) in enumerate(seed.records):
        parts.extend(frame(payload) for payload in inserts.get(index, []))
        parts.append(seed.data[start : start + size])
    parts.extend(frame(payload) for payload in inserts.get(len(seed.records), []))
    return b"".join(parts)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_framed_garbage_payloads_keep_every_good_record(seeds, scratch, fmt, data):
    seed = seeds[fmt]
    inserts = data.draw(st.dictionaries(st.integers(0, len(seed.records)), st.lists(hostile_payloads, min_size=1, max_size=3), max_size=4))
    outcome = read_bytes_as(scratch, seed.name, with_inserted_records(seed, inserts), f"framed garbage {fmt}")
    good_tags = {(kind, tag) for kind, tag, _ in seed.all_points()}
    assert {p for p in outcome.points if p[:2] in good_tags} == seed.all_points()
    assert outcome.skipped <= sum(len(v) for v in inserts.values())


# ----- hand-made adversaries


def _tensor_event(step: int, tensor: TensorProto, plugin: str | None) -> bytes:
    value = Summary.Value(tag=f"bomb/{plugin}", tensor=tensor)
    if plugin is not None:
        value.metadata.plugin_data.plugin_name = plugin
    return Event(wall_time=1.0, step=step, summary=Summary(value=[value])).SerializeToString()


def _shape(*dims: int) -> TensorShapeProto:
    return TensorShapeProto(dim=[TensorShapeProto.Dim(size=d) for d in dims])


def _deep_groups(depth: int) -> bytes:
    return field(7, 3, b"") * depth + field(7, 4, b"") * depth  # nested unknown groups


def _mindspore_adversaries() -> list[bytes]:
    huge_dims = MsEvent(wall_time=1.0, step=3)
    value = huge_dims.summary.value.add(tag="bomb/dims")
    value.tensor.dims.extend([1 << 40, 1 << 40])
    value.tensor.float_data.append(1.0)
    empty_histogram = MsEvent(wall_time=1.0, step=3)
    empty_histogram.summary.value.add(tag="bomb/histogram").histogram.nan_count = 1 << 62
    nan_buckets = MsEvent(wall_time=float("nan"), step=-5)
    bucket = nan_buckets.summary.value.add(tag="bomb/nan").histogram.buckets.add()
    bucket.left, bucket.width, bucket.count = float("nan"), float("inf"), -1
    return [huge_dims.SerializeToString(), empty_histogram.SerializeToString(), nan_buckets.SerializeToString()]


def adversarial_payloads() -> dict[str, bytes]:
    """Payloads with a valid checksum that try to make a decoder allocate, recurse or raise."""
    big = 1 << 27  # 128 M elements from a few bytes if a shape is believed
    return {
        "float shape bomb": _tensor_event(1, TensorProto(dtype=1, tensor_shape=_shape(big), float_val=[1.0]), "scalars"),
        "histogram shape bomb": _tensor_event(
            1, TensorProto(dtype=2, tensor_shape=_shape(big // 3, 3), double_val=[1.0]), "histograms"),
        "string shape bomb": _tensor_event(1, TensorProto(dtype=7, tensor_shape=_shape(big), string_val=[b"x" * 64]), "text"),
        "unlabelled shape bomb": _tensor_event(1, TensorProto(dtype=9, tensor_shape=_shape(big), int64_val=[7]), None),
        "overflowing shape": _tensor_event(1, TensorProto(dtype=1, tensor_shape=_shape(1 << 62, 1 << 62), float_val=[1.0]), None),
        "negative shape": _tensor_event(1, TensorProto(dtype=1, tensor_shape=_shape(-1, 3), float_val=[1.0, 2.0]), None),
        "content/shape mismatch": _tensor_event(
            1, TensorProto(dtype=1, tensor_shape=_shape(1000), tensor_content=b"\0" * 12), "scalars"),
        "unknown dtype": _tensor_event(1, TensorProto(dtype=999, tensor_shape=_shape(2)), "scalars"),
        "deep unknown groups": Event(wall_time=1.0, step=1).SerializeToString() + _deep_groups(5000),
        "deep nested bytes": b"".join(field(5, 2, b"") for _ in range(1)) + _nested(field(1, 2, b""), 3000),
        "huge varint step": field(1, 1, struct.pack("<d", 1.0)) + field(2, 0, 2**64 - 1),
        "length-delimited past its end": field(1, 1, struct.pack("<d", 1.0)) + varint((5 << 3) | 2) + varint(1 << 40),
        "invalid utf-8 tag": Event(wall_time=1.0, step=1).SerializeToString() + field(5, 2, field(1, 2, field(1, 2, b"\xff\xfe"))),
        "empty payload": b"",
        **{f"mindspore {i}": payload for i, payload in enumerate(_mindspore_adversaries())},
    }


def _nested(leaf: bytes, depth: int) -> bytes:
    payload = leaf
    for _ in range(depth):
        payload = field(5, 2, payload)
    return payload


@pytest.mark.parametrize("fmt", FORMATS)
def test_adversarial_records_between_good_ones(seeds, scratch, fmt):
    seed = seeds[fmt]
    cross_format = seeds["mindspore" if fmt == "tfevents" else "tfevents"]
    payloads = dict(adversarial_payloads())
    for index, (start, size, _) in enumerate(cross_format.records[:8]):
        payloads[f"other format's record {index}"] = cross_format.data[start + 12 : start + size - 4]
    good_tags = {(kind, tag) for kind, tag, _ in seed.all_points()}
    for label, payload in payloads.items():
        damaged = with_inserted_records(seed, {1: [payload], 30: [payload], len(seed.records): [payload]})
        outcome = read_bytes_as(scratch, seed.name, damaged, f"adversarial {fmt}", label)
        assert {p for p in outcome.points if p[:2] in good_tags} == seed.all_points(), label


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc(raw))


@pytest.mark.parametrize("fmt", FORMATS)
def test_adversarial_framing(seeds, scratch, fmt):
    seed = seeds[fmt]
    files = {
        "zero length": b"",
        "one byte": b"\x00",
        "half a header": seed.data[:6],
        "max length": _header(2**64 - 1) + b"\0" * 64,
        "huge length": _header(1 << 62) + b"\0" * 4096,
        "length just past the end": _header(100) + b"\0" * 103,
        "zero-length records": (_header(0) + struct.pack("<I", masked_crc(b""))) * 2000,
        "headers without payload": _header(1 << 20) * 3000,
        "zeros": bytes(1 << 20),
        "ones": b"\xff" * (1 << 16),
        "repeated headers of records claiming the rest of the file": b"".join(_header(len(seed.data) + i) for i in range(500)),
        "good records then a huge length": seed.data + _header(1 << 40) + b"\0" * 32,
        "good records then zeros": seed.data + bytes(5000),
        "zeros then good records": bytes(5000) + seed.data,
    }
    for label, data in files.items():
        outcome = read_bytes_as(scratch, seed.name, data, f"framing {fmt}", label)
        if label.startswith("good records then"):
            assert outcome.points == seed.all_points(), label
        if label == "zeros then good records":  # resynchronised onto the first valid header
            assert outcome.points == seed.all_points(), label


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_reading_a_damaged_file_as_it_grows_gives_what_reading_it_whole_gives(seeds, scratch, fmt, data):
    """A live writer appends in arbitrary pieces; damage must not make the result depend on them."""
    seed = seeds[fmt]
    damaged, _ = _mutate(seed.data, data.draw)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(damaged)), max_size=6)))
    whole = read_bytes_as(scratch, seed.name, damaged, f"grown {fmt}")
    run_dir = scratch / "grown"
    run_dir.mkdir(exist_ok=True)
    path = run_dir / seed.name
    path.write_bytes(b"")
    reader = LogdirReader(run_dir)
    written = 0
    for cut in [*cuts, len(damaged)]:
        with open(path, "ab") as handle:
            handle.write(damaged[written:cut])
        written = max(written, cut)
        reader.refresh()
    tried[f"grown {fmt}"] += len(cuts)
    assert points_of(reader.run(".")) == whole.points
    os.unlink(path)


# ----- MindSpore summary events of any content


def check_run_is_usable(run) -> None:
    """What the CLI and the tab need of any run read: text tags, int64 counts, a finite last
    update, and a report that analyses and serialises."""
    from tb_health_plugin.analysis.engine import analyze_run
    from tb_health_plugin.plugin import json_body

    for kind in (run.scalars, run.histograms, run.texts):
        assert all(isinstance(tag, str) for tag in kind)
    for series in run.histograms.values():
        assert np.all(series.inf_counts >= 0) and np.all(series.nan_counts >= 0)
    assert np.isfinite(run.last_wall_time)
    json_body(analyze_run(run))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mindspore_events_of_any_content_cost_at_most_themselves(seeds, scratch, data):
    seed = seeds["mindspore"]
    inserts = data.draw(st.dictionaries(st.integers(0, len(seed.records)),
                                        st.lists(fuzz_inputs.mindspore_events(), min_size=1, max_size=3), max_size=4))
    outcome = read_bytes_as(scratch, seed.name, with_inserted_records(seed, inserts), "mindspore events")
    good_tags = {(kind, tag) for kind, tag, _ in seed.all_points()}
    assert {p for p in outcome.points if p[:2] in good_tags} == seed.all_points()
    assert outcome.skipped <= sum(len(v) for v in inserts.values())
    check_run_is_usable(outcome.run)


# ----- the record framing


def assert_scan_finds_exactly(lengths: list[int], cut: float) -> None:
    """Records of these payload lengths, framed and scanned whole and cut at `cut` of their bytes."""
    framed = [fuzz_inputs.frame(bytes([n % 251]) * n) for n in lengths]
    data = b"".join(framed)
    starts = np.cumsum([0] + [len(f) for f in framed[:-1]]) + 12
    scan = scan_records(data)
    np.testing.assert_array_equal(scan.starts, starts)
    np.testing.assert_array_equal(scan.lengths, lengths)
    assert (scan.consumed, scan.skipped, scan.resyncing) == (len(data), 0, False)
    end = int(cut * len(data))
    whole = int(np.searchsorted(starts - 12 + np.asarray([len(f) for f in framed]), end, side="right"))
    scan = scan_records(data[:end])
    np.testing.assert_array_equal(scan.starts, starts[:whole])
    assert scan.skipped == 0 and scan.consumed == (starts[whole] - 12 if whole < len(framed) else len(data))


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6), repeats=st.integers(1, 200),
       tail=st.lists(st.integers(0, 3000), max_size=5), cut=st.floats(0, 1))
def test_scan_finds_exactly_the_records_of_any_valid_sequence(sizes, repeats, tail, cut):
    """Repeating cycles of record sizes take the predicted path, irregular ones the loop."""
    tried["valid framing"] += 1
    assert_scan_finds_exactly(sizes * repeats + tail, cut)


@settings(max_examples=50, deadline=None)
@given(cycle=st.lists(st.integers(0, 300), min_size=1, max_size=3), stretch=st.integers(0, 120),
       odd=st.lists(st.integers(0, 3000), min_size=1, max_size=3), stretches=st.integers(1, 20),
       extra=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3000)), max_size=4), cut=st.floats(0, 1))
def test_scan_finds_the_records_of_cycles_broken_by_odd_records(cycle, stretch, odd, stretches, extra, cut):
    """A record of another size every N records (an evaluation, per-layer values logged every
    hundred steps), in a pattern or not: odd records are stepped over, patterns of them learnt,
    and no record is lost, invented or misplaced, whatever the phase the cycle breaks at."""
    lengths: list[int] = []
    for index in range(stretches):
        lengths += (cycle * (stretch // len(cycle) + 1))[:stretch] + [odd[index % len(odd)]]
    for position, size in extra:
        lengths.insert(position % (len(lengths) + 1), size)
    tried["valid framing"] += 1
    assert_scan_finds_exactly(lengths, cut)


def test_an_odd_record_every_hundred_does_not_send_the_framing_back_to_the_loop(monkeypatch):
    """Following length fields one by one is the slow path: a log with a longer record after every
    hundred short ones (per-layer values every hundred steps) is framed by predictions, with only
    a few records followed one by one to learn the cycle."""
    from tb_health_plugin.readers import records

    followed: list[int] = []
    real_loop = records._frame_loop

    def counting_loop(buf, pos, max_records):
        headers, stop, at_end = real_loop(buf, pos, max_records)
        followed.append(len(headers))
        return headers, stop, at_end

    monkeypatch.setattr(records, "_frame_loop", counting_loop)
    lengths = ([110] * 100 + [700]) * 200
    data = b"".join(fuzz_inputs.frame(bytes(n)) for n in lengths)
    scan = records.scan_records(data)
    assert scan.starts.shape[0] == len(lengths) and scan.consumed == len(data)
    assert sum(followed) < len(lengths) // 50


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_framing_damage_between_records_loses_no_good_record(seeds, scratch, fmt, data, monkeypatch):
    """Lying lengths (past the end of the file, valid header checksum), bad checksums and garbage
    between good records: every good record is read, the damage is counted, and reading in small
    chunks or as the file grows changes nothing."""
    from tb_health_plugin.readers import logdir_reader

    seed = seeds[fmt]
    plan = data.draw(fuzz_inputs.framing_plans(len(seed.records)))
    damaged = fuzz_inputs.build_framing(plan, [seed.data[start : start + size] for start, size, _ in seed.records])
    monkeypatch.setattr(logdir_reader, "READ_CHUNK_BYTES", data.draw(st.sampled_from([100, 4096, 2 << 20])))
    outcome = read_bytes_as(scratch, seed.name, damaged, f"framing damage {fmt}")
    assert outcome.points == seed.all_points()
    kinds = [kind for kind, _ in plan]
    last_good = max(i for i, kind in enumerate(kinds) if kind == fuzz_inputs.GOOD)
    damage_inside = [kind for kind in kinds[:last_good] if kind != fuzz_inputs.GOOD]
    assert (outcome.skipped >= 1) == bool(damage_inside)
    lied = fuzz_inputs.LYING in damage_inside
    assert lied == any(note.kind == "damaged_records" for note in outcome.run.notes)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(damaged)), max_size=4)))
    run_dir = scratch / "grown-framing"
    run_dir.mkdir(exist_ok=True)
    path = run_dir / seed.name
    path.write_bytes(b"")
    reader = LogdirReader(run_dir)
    for cut in [*cuts, len(damaged)]:
        with open(path, "r+b") as handle:
            handle.seek(0, os.SEEK_END)
            handle.write(damaged[handle.tell() : max(cut, handle.tell())])
        reader.refresh()
    tried[f"grown framing {fmt}"] += len(cuts)
    assert points_of(reader.run(".")) == seed.all_points()
    os.unlink(path)


def test_the_same_fuzzing_under_the_upb_protobuf_backend():
    """This suite imports MindSpore first, which switches protobuf to its pure-python backend;
    a TensorBoard process parses with upb. Run this module again in such a process."""
    if api_implementation.Type() == "upb":
        pytest.skip("this process already parses with upb")
    script = "import sys; sys.modules['mindspore'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}  # set by MindSpore
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", script, "-q", "-s", "-p", "no:cacheprovider", __file__, "-k", "garbage or adversarial or any_content or framing_damage"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=WATCHDOG_S, env=env,
    )
    summary = [line for line in done.stdout.splitlines() if line.startswith("fuzz_readers:")]
    print("\n" + "\n".join(summary))
    assert done.returncode == 0, done.stdout[-4000:]
    assert "protobuf backend upb" in done.stdout
