"""A run's saved reading state stands for everything the reader holds: a field added to the
reader's state must be saved or declared fresh, and a saved state read back continues exactly as
the reader that saved it would."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tb_health_plugin.readers import saved_state
from tb_health_plugin.readers.discovery import EventFile
from tb_health_plugin.readers.logdir_reader import FileState, LogdirReader, RunState
from tb_health_plugin.readers.tfevents import TfeventsDecoder
from tb_health_plugin.tfrecord import frame
from tests.readers_fixtures import event, legacy_histogram_value, scalar_value, tensor_value, write_events


def test_every_reader_field_is_saved_or_declared_fresh() -> None:
    assert set(vars(RunState("run"))) == saved_state.SAVED_RUN_FIELDS | saved_state.FRESH_RUN_FIELDS
    assert not saved_state.SAVED_RUN_FIELDS & saved_state.FRESH_RUN_FIELDS
    assert set(vars(FileState(EventFile("events.out.tfevents.1", "tfevents")))) == saved_state.SAVED_FILE_FIELDS
    assert set(vars(TfeventsDecoder())) == {"plugin_by_tag"}  # the one decoder field that is saved


def _events(steps: range) -> list:
    out = []
    for step in steps:
        values = [scalar_value("train/loss", 1.0 / step), scalar_value("train/lr", 1e-3)]
        if step % 10 == 0:
            values.append(legacy_histogram_value("grads/w", np.random.default_rng(step).normal(size=40),
                                                 np.linspace(-4, 4, 9)))
        out.append(event(step, *values))
    out.append(event(steps[-1], tensor_value("notes", np.array([b"hello"], dtype=object), "text")))
    return out


def test_a_state_read_back_continues_as_the_reader_that_saved_it(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    path = write_events(logdir / "run", _events(range(1, 51)))
    reader = LogdirReader(logdir)
    reader.refresh()
    saved = tmp_path / "run.state"
    state = reader.run_state("run")
    saved_state.save_run(state, str(saved), code="c", token="t")

    restored, token = saved_state.load_run(str(saved), code="c")
    assert token == "t"
    for field in saved_state.SAVED_RUN_FIELDS - {"scalars", "histograms", "texts", "files", "tfevents_decoder"}:
        assert getattr(restored, field) == getattr(state, field), field
    assert restored.tfevents_decoder.plugin_by_tag == state.tfevents_decoder.plugin_by_tag
    assert {p: vars(f) for p, f in restored.files.items()} == {p: vars(f) for p, f in state.files.items()}

    with open(path, "ab") as out:  # the file grows: both readers read the same new bytes
        out.write(b"".join(frame(e.SerializeToString()) for e in _events(range(51, 81))))
    fresh = LogdirReader(logdir)
    fresh.take_saved_states({"run": restored})
    reader.refresh()
    fresh.refresh()
    before, after = reader.run("run"), fresh.run("run")
    assert sorted(after.scalars) == sorted(before.scalars)
    for tag in before.scalars:
        np.testing.assert_array_equal(after.scalars[tag].steps, before.scalars[tag].steps)
        np.testing.assert_array_equal(after.scalars[tag].values, before.scalars[tag].values)
    assert sorted(after.histograms) == sorted(before.histograms) and sorted(after.texts) == sorted(before.texts)
    assert after.scalars["train/loss"].steps[-1] == 80


def test_a_state_of_another_version_is_not_used(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    write_events(logdir / "run", _events(range(1, 11)))
    reader = LogdirReader(logdir)
    reader.refresh()
    saved = tmp_path / "run.state"
    saved_state.save_run(reader.run_state("run"), str(saved), code="old", token="t")
    try:
        saved_state.load_run(str(saved), code="new")
    except saved_state.UnusableState as why:
        assert "another version" in str(why)
    else:
        raise AssertionError("a state saved by another version was used")
