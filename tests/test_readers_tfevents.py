"""Reading tfevents written by TensorBoard's EventFileWriter and by tensorboardX."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.readers import LogdirReader, read_logdir
from tests.readers_fixtures import (
    event,
    legacy_histogram_value,
    tensor_value,
    write_events,
    write_scalar_run,
)


def test_legacy_scalars_are_read_with_steps_wall_times_and_values(tmp_path):
    steps = list(range(0, 500, 5))
    write_scalar_run(tmp_path / "exp1", {"train/loss": (steps, [1.0 / (s + 1) for s in steps]), "lr": ([0, 7], [0.1, 0.05])})
    (run,) = read_logdir(tmp_path)
    assert run.name == "exp1"
    loss = run.scalars["train/loss"]
    np.testing.assert_array_equal(loss.steps, steps)
    np.testing.assert_allclose(loss.values, [1.0 / (s + 1) for s in steps], rtol=1e-6)  # stored as float32
    np.testing.assert_array_equal(loss.wall_times, [1_767_000_000.0 + s for s in steps])
    assert loss.steps.dtype == np.int64 and loss.values.dtype == np.float64
    np.testing.assert_array_equal(run.scalars["lr"].steps, [0, 7])
    assert run.skipped_records == 0
    assert run.last_wall_time == 1_767_000_000.0 + 495


def test_nan_and_inf_scalars_are_kept_as_logged(tmp_path):
    write_scalar_run(tmp_path, {"loss": ([1, 2, 3], [1.0, float("nan"), float("inf")])})
    (run,) = read_logdir(tmp_path)
    values = run.scalars["loss"].values
    assert values[0] == 1.0 and np.isnan(values[1]) and np.isposinf(values[2])
    assert run.name == "."


def test_tensor_scalars_histograms_and_text_follow_the_first_values_metadata(tmp_path):
    rng = np.random.default_rng(0)
    events = []
    for step in range(3):
        first = step == 0
        buckets = np.column_stack([np.arange(4.0), np.arange(4.0) + 1, rng.integers(0, 9, 4)])
        events.append(event(
            step,
            tensor_value("tf2/loss", np.float32(2.0 - step), "scalars" if first else None),
            tensor_value("grad/w", buckets, "histograms" if first else None),
            tensor_value("health/findings", np.array(f"finding {step}".encode()), "text" if first else None),
            tensor_value("images/x", np.zeros((2, 2)), "images" if first else None),
        ))
    write_events(tmp_path / "tf2", events)
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.scalars["tf2/loss"].values, [2.0, 1.0, 0.0])
    histogram = run.histograms["grad/w"]
    np.testing.assert_array_equal(histogram.steps, [0, 1, 2])
    assert histogram.buckets[2].shape == (4, 3)
    np.testing.assert_array_equal(histogram.nan_counts, [0, 0, 0])
    assert run.texts["health/findings"].values == ["finding 0", "finding 1", "finding 2"]
    assert "images/x" not in run.scalars and "images/x" not in run.histograms


def test_legacy_histogram_proto_becomes_left_right_count_buckets(tmp_path):
    data = np.linspace(-1.0, 1.0, 101)
    edges = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    write_events(tmp_path, [event(10, legacy_histogram_value("weight/w", data, edges))])
    (run,) = read_logdir(tmp_path)
    (buckets,) = run.histograms["weight/w"].buckets
    np.testing.assert_allclose(buckets[:, 0], [-1.0, -0.5, 0.0, 0.5])
    np.testing.assert_allclose(buckets[:, 1], [-0.5, 0.0, 0.5, 1.0])
    assert buckets[:, 2].sum() == 101


def test_tensorboardx_scalars_histograms_and_vs_samples_twins(tmp_path):
    tensorboardX = pytest.importorskip("tensorboardX")
    writer = tensorboardX.SummaryWriter(str(tmp_path / "rank_0"))
    for step in range(1, 21):
        writer.add_scalar("loss", 5.0 / step, step)
        writer.add_scalar("loss vs samples", 5.0 / step, step * 32)
        writer.add_histogram("weight/fc", np.random.default_rng(step).normal(size=200), step)
        writer.add_text("note", f"step {step}", step)
    writer.close()
    (run,) = read_logdir(tmp_path)
    assert run.name == "rank_0"
    np.testing.assert_array_equal(run.scalars["loss"].steps, np.arange(1, 21))
    np.testing.assert_array_equal(run.scalars["loss_vs_samples"].steps, np.arange(1, 21) * 32)
    histogram = run.histograms["weight/fc"]
    assert len(histogram) == 20 and all(b.shape[1] == 3 for b in histogram.buckets)
    assert all(b[:, 2].sum() == 200 for b in histogram.buckets)
    assert run.texts["note/text_summary"].values[-1] == "step 20"  # tensorboardX appends /text_summary


def test_runs_are_named_like_tensorboard_and_non_event_files_ignored(tmp_path):
    write_scalar_run(tmp_path, {"a": ([1], [1.0])})
    write_scalar_run(tmp_path / "exp" / "rank_0", {"a": ([1], [1.0])})
    write_scalar_run(tmp_path / "exp" / "rank_1", {"a": ([1], [1.0])})
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "events.txt").write_text("not an event file")
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "events.out.tfevents.1.host.profile-empty").write_bytes(b"")
    reader = LogdirReader(tmp_path)
    assert reader.run_names() == []
    assert reader.refresh() is True
    assert reader.run_names() == [".", "exp/rank_0", "exp/rank_1"]
    with pytest.raises(KeyError):
        reader.run("notes")


def test_run_with_only_empty_or_garbage_files_still_appears(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "events.out.tfevents.1.host").write_bytes(b"")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "events.out.tfevents.1.host").write_bytes(b"\xff" * 100)
    runs = {run.name: run for run in read_logdir(tmp_path)}
    assert set(runs) == {"empty", "garbage"}
    assert runs["empty"].scalars == {} and runs["empty"].skipped_records == 0
    assert runs["garbage"].scalars == {} and runs["garbage"].skipped_records >= 1


def test_one_number_tensors_of_every_numeric_layout_are_scalars(tmp_path):
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    from tests.readers_fixtures import Summary

    def scalar_tensor(tag, step, **fields):
        value = tensor_value(tag, np.float32(0), "scalars" if step == 0 else None)
        value.tensor.CopyFrom(TensorProto(**fields))
        return value

    shape_1 = TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)])
    events = [
        event(0, scalar_tensor("a", 0, dtype=1, float_val=[1.5])),
        event(0, scalar_tensor("b", 0, dtype=2, tensor_content=np.float64(2.5).tobytes())),
        event(0, scalar_tensor("c", 0, dtype=9, int64_val=[7], tensor_shape=shape_1)),
        event(0, scalar_tensor("d", 0, dtype=3, tensor_content=np.int32(-3).tobytes())),
        event(0, Summary.Value(tag="e", tensor=tensor_value("e", np.array([4.0, 5.0]), None).tensor)),
    ]
    write_events(tmp_path, events)
    (run,) = read_logdir(tmp_path)
    assert {tag: s.values.tolist() for tag, s in run.scalars.items()} == {"a": [1.5], "b": [2.5], "c": [7.0], "d": [-3.0]}
    assert "e" not in run.scalars  # two numbers without metadata: neither scalar nor [k, 3] histogram
