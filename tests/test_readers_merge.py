"""Several files per run, resumes that step back, duplicate steps, and concurrent snapshots."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_health_plugin.readers import LogdirReader, read_logdir
from tb_health_plugin.readers.accumulate import ScalarBuilder, surviving_points
from tests.readers_fixtures import event, scalar_value, write_events


def test_resume_that_steps_back_keeps_the_later_writes_and_records_a_backtrack(tmp_path):
    write_events(tmp_path, [event(s, scalar_value("loss", 1.0)) for s in range(0, 101, 10)], suffix=".a")
    resumed = [event(s, scalar_value("loss", 2.0), wall_time=1_800_000_000.0 + s) for s in range(60, 201, 10)]
    write_events(tmp_path, resumed, suffix=".b")
    (run,) = read_logdir(tmp_path)
    loss = run.scalars["loss"]
    np.testing.assert_array_equal(loss.steps, np.arange(0, 201, 10))
    np.testing.assert_array_equal(loss.values, [1.0] * 6 + [2.0] * 15)  # steps 60.. come from the resume
    (backtrack,) = run.backtracks
    assert (backtrack.tag, backtrack.from_step, backtrack.to_step) == ("loss", 100, 60)
    assert backtrack.wall_time == 1_800_000_060.0


def test_duplicate_step_counts_once_and_is_not_a_backtrack(tmp_path):
    steps = [1, 2, 3, 3, 4]  # MindSpore writes the epoch-end step twice
    write_events(tmp_path, [event(s, scalar_value("loss", float(i))) for i, s in enumerate(steps)])
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.scalars["loss"].steps, [1, 2, 3, 4])
    np.testing.assert_array_equal(run.scalars["loss"].values, [0.0, 1.0, 3.0, 4.0])  # the later write wins
    assert run.backtracks == []


def test_backtrack_across_incremental_reads_truncates_what_was_read_before(tmp_path):
    write_events(tmp_path, [event(s, scalar_value("loss", 1.0)) for s in range(10)], suffix=".a")
    reader = LogdirReader(tmp_path)
    reader.refresh()
    before = reader.run(".")
    resumed = [event(s, scalar_value("loss", 2.0), wall_time=1_800_000_000.0 + s) for s in range(5, 8)]  # written after
    write_events(tmp_path, resumed, suffix=".b")
    reader.refresh()
    after = reader.run(".")
    np.testing.assert_array_equal(after.scalars["loss"].steps, [0, 1, 2, 3, 4, 5, 6, 7])
    np.testing.assert_array_equal(after.scalars["loss"].values, [1.0] * 5 + [2.0] * 3)
    np.testing.assert_array_equal(before.scalars["loss"].steps, np.arange(10))  # untouched snapshot
    np.testing.assert_array_equal(before.scalars["loss"].values, [1.0] * 10)
    assert [(b.from_step, b.to_step) for b in after.backtracks] == [(9, 5)]


def test_files_are_merged_in_the_order_their_names_say_they_were_started(tmp_path):
    run_dir = tmp_path / "run"
    later = write_events(run_dir, [event(s, scalar_value("loss", 2.0), wall_time=1_800_000_000.0 + s) for s in range(5, 10)])
    earlier = write_events(run_dir, [event(s, scalar_value("loss", 1.0)) for s in range(0, 8)])
    ts = int(later.name.split(".")[3])
    earlier.rename(run_dir / earlier.name.replace(f".{int(earlier.name.split('.')[3])}.", f".{ts - 100}.", 1))
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.scalars["loss"].values, [1.0] * 5 + [2.0] * 5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12), min_size=1, max_size=5))
def test_batched_merge_equals_the_point_by_point_rule(batches):
    builder = ScalarBuilder("t")
    expected: dict[int, float] = {}
    value = 0.0
    for batch in batches:
        values = []
        for step in batch:
            value += 1.0
            values.append(value)
            expected = {s: v for s, v in expected.items() if s < step}  # a later write at or below wins
            expected[step] = value
        builder.extend(np.asarray(batch, np.int64), np.zeros(len(batch)), np.asarray(values))
    series = builder.snapshot()
    np.testing.assert_array_equal(series.steps, sorted(expected))
    np.testing.assert_array_equal(series.values, [expected[s] for s in sorted(expected)])


def test_surviving_points_drops_every_point_a_later_one_overrides():
    np.testing.assert_array_equal(surviving_points(np.array([1, 2, 3, 2, 5, 5])), [True, False, False, True, False, True])


def test_run_snapshots_stay_consistent_while_another_thread_refreshes(tmp_path):
    run_dir = tmp_path / "live"
    write_events(run_dir, [event(s, scalar_value("loss", float(s))) for s in range(100)], suffix=".0")
    reader = LogdirReader(tmp_path)
    reader.refresh()
    stop = threading.Event()
    problems: list[str] = []

    def read_snapshots():
        while not stop.is_set():
            loss = reader.run("live").scalars["loss"]
            if not (len(loss.steps) == len(loss.values) and np.all(np.diff(loss.steps) > 0)
                    and np.array_equal(loss.values, loss.steps.astype(float))):
                problems.append("inconsistent snapshot")

    thread = threading.Thread(target=read_snapshots)
    thread.start()
    for chunk in range(1, 6):
        write_events(run_dir, [event(s, scalar_value("loss", float(s))) for s in range(chunk * 100, chunk * 100 + 100)],
                     suffix=f".{chunk}")
        reader.refresh()
    stop.set()
    thread.join()
    assert problems == []
    assert len(reader.run("live").scalars["loss"]) == 600


def test_text_is_an_event_log_entries_at_earlier_steps_are_kept_and_no_resume(tmp_path):
    from tests.readers_fixtures import tensor_value

    findings = [(90, "spike at 90"), (20, "lr jump at 20"), (140, "stall at 140"), (85, "nan at 85"), (85, "again")]
    events = [event(step, tensor_value("health/findings", np.array(text.encode()), "text")) for step, text in findings]
    events.insert(2, event(100, scalar_value("loss", 1.0)))
    write_events(tmp_path, events[:3], suffix=".a")
    reader = LogdirReader(tmp_path)
    reader.refresh()
    write_events(tmp_path, events[3:], suffix=".b")
    reader.refresh()
    run = reader.run(".")
    texts = run.texts["health/findings"]
    assert texts.steps.tolist() == [20, 85, 85, 90, 140]
    assert texts.values == ["lr jump at 20", "nan at 85", "again", "spike at 90", "stall at 140"]
    assert run.backtracks == []
