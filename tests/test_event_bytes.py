"""The hooks' hand-built events are byte for byte what TensorBoard's protos serialize."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2

from trainer_hooks import event_bytes

tags = st.text(min_size=0, max_size=200)  # empty, unicode, and tags longer than a one-byte length
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e40, -1e40, 1e-45, 3.4e38])
steps = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.sampled_from([0, 1, 127, 128, 2**40])
wall_times = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1.7e9])


def proto_scalars(values, step, wall_time) -> bytes:
    event = event_pb2.Event(wall_time=wall_time, step=step)
    for tag, value in values:
        event.summary.value.add(tag=tag, simple_value=value)
    return event.SerializeToString()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(tags, floats), min_size=1, max_size=40), steps, wall_times)  # the writer skips empty lists
def test_scalars_event_matches_protobuf(values, step, wall_time):
    assert event_bytes.scalars_event(values, step, wall_time) == proto_scalars(values, step, wall_time)


def test_scalar_values_read_back_as_float32():
    event = event_pb2.Event.FromString(event_bytes.scalars_event([("a", 0.1), ("b", 1e40), ("c", math.nan)], 7, 1.5))
    assert event.step == 7 and event.wall_time == 1.5
    values = {value.tag: value.simple_value for value in event.summary.value}
    assert values["a"] == np.float32(0.1) and values["b"] == math.inf and math.isnan(values["c"])


histogram_scalars = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(tags, st.tuples(*[histogram_scalars] * 5),
                          st.lists(st.floats(allow_nan=False), max_size=31)), min_size=1, max_size=5),
       steps, wall_times)
def test_histograms_event_matches_protobuf(items, step, wall_time):
    event = event_pb2.Event(wall_time=wall_time, step=step)
    values = []
    for tag, (low, high, num, total, squares), limits in items:
        counts = np.arange(len(limits), dtype=np.float64)
        histo = event.summary.value.add(tag=tag).histo
        histo.min, histo.max, histo.num, histo.sum, histo.sum_squares = low, high, num, total, squares
        histo.bucket_limit.extend(limits)
        histo.bucket.extend(counts.tolist())
        values.append(event_bytes.histogram_value(tag, low, high, num, total, squares, np.array(limits), counts))
    assert event_bytes.histograms_event(values, step, wall_time) == event.SerializeToString()


def test_varint_matches_the_encoding_of_int64():
    assert event_bytes.varint(0) == b"\x00"
    for value in (1, 127, 128, 300, 2**35, 2**63 - 1, -1, -(2**63)):
        assert event_bytes._STEP + event_bytes.varint(value) == event_pb2.Event(step=value).SerializeToString()


def test_the_writer_falls_back_to_add_event_when_tensorboard_moves_its_queue(tmp_path):
    import warnings

    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    from trainer_hooks.writer import SafeEventWriter

    class WithoutQueue:  # TensorBoard's writer with only its public methods
        def __init__(self, writer):
            self.add_event, self.flush, self.close = writer.add_event, writer.flush, writer.close

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a failed write warns: none may
        writer = SafeEventWriter(str(tmp_path))
        writer._writer = WithoutQueue(writer._writer)
        writer.scalars([("train/loss", 0.5), ("train/lr", 1e-3)], step=3)
        writer.histograms([("weights/w", np.arange(10, dtype=np.float32))], step=3)
        writer.close()
    events = [event for path in tmp_path.iterdir() for event in LegacyEventFileLoader(str(path)).Load()]
    values = {value.tag: value for event in events for value in event.summary.value}
    assert values["train/loss"].simple_value == 0.5 and values["weights/w"].histo.num == 10
