"""The vectorised simple_value path agrees with TensorBoard's own loader on arbitrary events."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tb_health_plugin.readers import fast_scalars
from tb_health_plugin.readers.records import scan_records
from tb_health_plugin.readers.tfevents import TfeventsDecoder
from tests.readers_fixtures import write_events, write_scalar_run

tags = st.one_of(st.sampled_from(["loss", "train/lr", "grad_norm/layer.0", ""]), st.text(max_size=130))
values = st.one_of(st.floats(width=32), st.just(math.nan))
scalar_events = st.builds(
    lambda step, wall, pairs, metadata: (step, wall, pairs, metadata),
    st.one_of(st.integers(0, 3), st.integers(-(2**63), 2**63 - 1)),
    st.floats(0, 2e9, allow_nan=False),
    st.one_of(st.lists(st.tuples(tags, values), min_size=0, max_size=3),
              st.lists(st.tuples(tags, values), min_size=4, max_size=24)),  # summaries past 127 bytes too
    st.booleans(),
)


def _oracle(path) -> dict[str, list[tuple[int, float, float]]]:
    series = defaultdict(list)
    for event in LegacyEventFileLoader(str(path)).Load():  # events as written, no migration
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                series[value.tag].append((event.step, event.wall_time, value.simple_value))
    return series


def _ours(path) -> dict[str, list[tuple[int, float, float]]]:
    data = path.read_bytes()
    scan = scan_records(data)
    batch = TfeventsDecoder().decode(np.frombuffer(data, np.uint8), scan.starts, scan.lengths)
    return {tag: list(zip(s.tolist(), w.tolist(), v.tolist(), strict=True)) for tag, s, w, v in batch.scalars_by_tag()}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(scalar_events, min_size=1, max_size=25))
def test_fast_and_protobuf_paths_together_match_tensorboards_loader(tmp_path_factory, generated):
    events = []
    for step, wall, pairs, metadata in generated:
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in pairs])
        if metadata and summary.value:
            summary.value[0].metadata.display_name = "shown"
        events.append(Event(step=step, wall_time=wall, summary=summary))
    path = write_events(tmp_path_factory.mktemp("fast"), events)
    expected, got = _oracle(path), _ours(path)
    assert set(got) == set(expected)
    for tag, points in expected.items():
        assert len(got[tag]) == len(points)
        for (s1, w1, v1), (s2, w2, v2) in zip(got[tag], points, strict=True):
            assert s1 == s2 and w1 == w2 and _same(v1, v2)


def test_the_common_writer_layout_takes_the_vectorised_path(tmp_path):
    path = write_scalar_run(tmp_path, {"train/loss": (list(range(0, 300)), [0.5] * 300), "lr": ([0, 2**40], [1.0, 2.0])})
    data = path.read_bytes()
    scan = scan_records(data)
    fast = fast_scalars.decode_simple_values(np.frombuffer(data, np.uint8), scan.starts, scan.lengths)
    assert int(fast.decoded.sum()) == 302  # every scalar record; only the file_version event is left
    assert not fast.decoded[0]


def test_events_of_several_simple_values_take_the_vectorised_path(tmp_path):
    """Trainers that log every tag of a step in one `Summary` (here 4 a step, plus 16 per-layer
    values every tenth step, a summary longer than 127 bytes) are decoded without protobuf, and
    read exactly as TensorBoard's loader reads them, in write order within each tag."""
    events = []
    for step in range(200):
        pairs = [("train/loss", 1.0 / (step + 1)), ("train/lr", 1e-3), ("train/grad_norm", float(step)), ("x", -0.0)]
        events.append(Event(step=step, wall_time=1e9 + step,
                            summary=Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in pairs])))
        if step % 10 == 0:
            layers = [Summary.Value(tag=f"grad_norm/model.layers.{i}.attention.wq.weight", simple_value=i) for i in range(16)]
            layers.append(Summary.Value(tag="x", simple_value=step + 0.5))  # a tag twice in one step
            events.append(Event(step=step, wall_time=1e9 + step, summary=Summary(value=layers)))
    path = write_events(tmp_path, events)
    data = path.read_bytes()
    scan = scan_records(data)
    fast = fast_scalars.decode_simple_values(np.frombuffer(data, np.uint8), scan.starts, scan.lengths)
    assert int(fast.decoded.sum()) == len(events)  # all but the file_version event
    assert not fast.decoded[0]
    assert len(fast.points) == 200 * 4 + 20 * 17
    expected, got = _oracle(path), _ours(path)
    assert got == {tag: [tuple(point) for point in points] for tag, points in expected.items()}
    assert [value for _, _, value in got["x"][:3]] == [-0.0, 0.5, -0.0]
