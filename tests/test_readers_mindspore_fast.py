"""The vectorised MindSpore paths (scalar-only events, histogram buckets) agree with protobuf."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tb_health_plugin.readers import read_logdir
from tb_health_plugin.readers.mindspore_summary import buckets_from_bytes
from tb_health_plugin.readers.schema import MsBucket, MsEvent
from tb_health_plugin.tfrecord import masked_crc

MS_NAME = "events.out.events.summary.1767000000.0.host_MS"


def _frame(payload: bytes) -> bytes:
    header = len(payload).to_bytes(8, "little")
    return header + masked_crc(header).to_bytes(4, "little") + payload + masked_crc(payload).to_bytes(4, "little")


def _write(folder, events) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    version = MsEvent(wall_time=1.0, version="MindSpore.Event:1")
    (folder / MS_NAME).write_bytes(b"".join(_frame(e.SerializeToString()) for e in [version, *events]))


tags = st.one_of(st.sampled_from(["loss/auto", "lr", "grad_norm", ""]), st.text(max_size=140))
values = st.lists(st.tuples(tags, st.floats(width=32)), max_size=6)
ms_events = st.lists(
    st.tuples(st.integers(0, 2**62), st.floats(0, 2e9, allow_nan=False), values, st.booleans()), min_size=1, max_size=20
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ms_events)
def test_scalar_events_decode_like_protobuf(tmp_path_factory, generated):
    folder = tmp_path_factory.mktemp("ms")
    events = []
    expected: dict[str, list[tuple[int, float]]] = {}
    for step, wall, pairs, with_histogram in generated:
        event = MsEvent(wall_time=wall, step=step)
        for tag, value in pairs:
            event.summary.value.add(tag=tag).scalar_value = value
        if with_histogram:  # such events take the protobuf path
            event.summary.value.add(tag="h").histogram.buckets.add(left=0.0, width=1.0, count=2)
        events.append(event)
        parsed = MsEvent.FromString(event.SerializeToString())
        for value in parsed.summary.value:
            if value.WhichOneof("value") == "scalar_value":
                expected.setdefault(value.tag, []).append((parsed.step, value.scalar_value))
    _write(folder, events)
    (run,) = read_logdir(folder)
    for tag, points in expected.items():
        survivors: dict[int, float] = {}
        for step, value in points:  # the reader's rule: a later write at or below a step wins
            survivors = {s: v for s, v in survivors.items() if s < step}
            survivors[step] = value
        series = run.scalars[tag]
        assert series.steps.tolist() == sorted(survivors)
        for got, want in zip(series.values.tolist(), [survivors[s] for s in sorted(survivors)], strict=True):
            assert got == want or (math.isnan(got) and math.isnan(want))
    assert set(run.scalars) == set(expected)
    assert run.skipped_records == 0


def test_buckets_in_mindspores_layout_and_any_other_decode_the_same():
    standard = [MsBucket(left=-1.5, width=0.5, count=c).SerializeToString() for c in (0, 1, 300, 2**40)]
    reordered = MsBucket(left=2.0, width=0.25, count=7).SerializeToString()
    reordered = reordered[-2:] + reordered[:-2]  # count first: still a valid message, not the usual layout
    table = buckets_from_bytes([*standard, reordered])
    np.testing.assert_array_equal(table, [[-1.5, -1.0, 0], [-1.5, -1.0, 1], [-1.5, -1.0, 300], [-1.5, -1.0, 2**40],
                                          [2.0, 2.25, 7]])
    assert buckets_from_bytes([]).shape == (0, 3)
