"""Triage reading less: ranks that may be trusted are first read heads-only (every scalar tag's
first and last points, whole series only for what triage and the cross-rank checks read), the
ranks analysed in full are read again in full, and every report is the one a full read gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_health_plugin import contract
from tb_health_plugin.analysis import triage
from tb_health_plugin.answers import series_payload
from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.readers.accumulate import HeadsBuilder, ScalarBuilder
from tb_health_plugin.run_data import ScalarHeads
from tb_health_plugin.service import HealthService, heads_only_policy
from tests.eventlogs import WALL_TIME_START
from tests.test_triage import RANKS, write_jobs


def reader_of(logdir, heads_only: bool) -> LogdirReader:
    policy = heads_only_policy("on", dict) if heads_only else None
    reader = LogdirReader(logdir, heads_only=policy)
    reader.refresh()
    return reader


def jobs_of(reader: LogdirReader) -> dict[str, list[str]]:
    jobs: dict[str, list[str]] = {}
    for name in reader.run_names():
        jobs.setdefault(contract.job_of(name) or name, []).append(name)
    return jobs


def triaged_reports(reader: LogdirReader, members: list[str]) -> list[dict]:
    """What the service does for a unit: read in full what needs it, then analyse with triage."""
    runs = [reader.run(name) for name in members]
    reader.read_in_full(triage.needing_points(runs, None, True))
    return triage.analyze_unit([reader.run(name) for name in members], lang=None, triage=True)


@pytest.fixture(scope="module")
def job_logdir(tmp_path_factory):
    """job: rank 1 NaN (reported online), rank 2 without online analysis, ranks 0 and 3 healthy;
    job_killed: rank 2 killed before its NaN reached an online analysis."""
    return write_jobs(tmp_path_factory.mktemp("triage_reading"))


batches = st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=12), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_heads_hold_the_first_and_last_points_and_the_backtracks_of_a_full_read(written):
    """Resumes included: steps going back drop the points held from there on (`resume.py`)."""
    full, heads = ScalarBuilder("t"), HeadsBuilder("t")
    wall = 0.0
    for batch in written:
        steps = np.array(batch, dtype=np.int64)
        walls = wall + np.arange(steps.size, dtype=np.float64)
        wall += steps.size
        values = steps * 0.5 + walls
        assert heads.extend(steps, walls, values) == full.extend(steps, walls, values)
    whole, ends = full.snapshot(), heads.snapshot()
    assert isinstance(ends, ScalarHeads)
    picked = [0, len(whole) - 1] if len(whole) > 1 else [0]
    for column in ("steps", "wall_times", "values"):
        np.testing.assert_array_equal(getattr(ends, column), getattr(whole, column)[picked])


def test_a_heads_only_read_keeps_what_triage_decides_on(job_logdir):
    full, heads = reader_of(job_logdir, False), reader_of(job_logdir, True)
    assert heads.run_names() == full.run_names()
    kept = triage.points_kept()
    for name in full.run_names():
        whole, read = full.run(name), heads.run(name)
        assert sorted(read.scalars) == sorted(whole.scalars)
        assert {t: (s.steps.tolist(), s.values) for t, s in read.texts.items()} == {
            t: (s.steps.tolist(), s.values) for t, s in whole.texts.items()}
        assert read.step_range() == whole.step_range() and read.backtracks == whole.backtracks
        assert triage.full_analysis_reason(read) == triage.full_analysis_reason(whole)
        assert triage.online_verdict(read) == triage.online_verdict(whole)
        heads_only = contract.rank_of(name) != 0
        assert heads.is_heads_only(name) == heads_only
        for tag, series in read.scalars.items():
            if not heads_only or tag in kept:
                np.testing.assert_array_equal(series.values, whole.scalars[tag].values)
            else:
                assert isinstance(series, ScalarHeads) and len(series) == 2
    assert heads.memory_bytes() < 0.6 * full.memory_bytes()


@pytest.mark.parametrize("job", ["job", "job_killed"])
def test_reports_equal_those_of_a_full_read_and_trusted_ranks_stay_heads_only(job_logdir, job):
    full, heads = reader_of(job_logdir, False), reader_of(job_logdir, True)
    members = jobs_of(full)[job]
    expected = triage.analyze_unit([full.run(name) for name in members], lang=None, triage=True)
    assert triaged_reports(heads, members) == expected
    for report in expected:
        assert heads.is_heads_only(report["run"]) == (report["analysis"] == triage.ONLINE)
    assert sum(heads.is_heads_only(name) for name in members) == {"job": 1, "job_killed": 2}[job]  # trusted


def write_rank(folder, series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """tag: (steps, wall times, values), written with TensorBoard's own writer."""
    folder.mkdir(parents=True)
    writer = EventFileWriter(str(folder))
    for tag, (steps, walls, values) in series.items():
        for step, wall, value in zip(steps, walls, values, strict=True):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            writer.add_event(Event(wall_time=float(wall), step=int(step), summary=summary))
    writer.close()


def test_a_job_timed_by_the_wall_clock_is_read_in_full(tmp_path):
    """Without a step time, the cross-rank checks time ranks by the wall time between logged
    points of the loss, or with too short a loss of any tag: a heads-only rank has not kept those,
    so its job is read in full, and rank 3 (twice as slow) is still found."""
    steps = np.arange(10, 1010, 10)
    for rank in range(RANKS):
        walls = WALL_TIME_START + steps * (0.2 if rank == 3 else 0.1)
        write_rank(tmp_path / "job" / f"rank_{rank}", {
            contract.LOSS: (steps[-2:], walls[-2:], [0.5, 0.5]),  # too short to be timed by
            contract.LEARNING_RATE: (steps, walls, np.full(steps.size, 1e-3)),
            contract.ONLINE_VERDICT: (steps[-1:], walls[-1:], [0.0]),  # healthy up to the last step
        })
    full, heads = reader_of(tmp_path, False), reader_of(tmp_path, True)
    members = jobs_of(full)["job"]
    runs = [heads.run(name) for name in members]
    assert triage.needing_points(runs, None, True) == members[1:]  # every heads-only rank
    expected = triage.analyze_unit([full.run(name) for name in members], lang=None, triage=True)
    slow = {r["run"] for r in expected for f in r["findings"] if f.kind == "throughput"}
    assert slow == {"job/rank_3"}
    assert triaged_reports(heads, members) == expected


def test_a_role_overridden_to_a_tag_kept_heads_only_reads_the_job_in_full(job_logdir):
    reader = reader_of(job_logdir, True)
    runs = [reader.run(name) for name in jobs_of(reader)["job"]]
    assert triage.needing_points(runs, None, True) == ["job/rank_1", "job/rank_2"]
    overrides = {"loss": contract.LOSS_MAX}  # kept heads-only: the override came after the read
    assert triage.needing_points(runs, overrides, True) == ["job/rank_1", "job/rank_2", "job/rank_3"]
    assert triage.needing_points(runs, None, False) == ["job/rank_1", "job/rank_2", "job/rank_3"]


def test_the_service_reads_a_trusted_rank_in_full_when_its_points_are_asked_for(job_logdir, monkeypatch):
    monkeypatch.setenv(triage.ENV_MODE, "on")
    service = HealthService(str(job_logdir), refresh_interval_s=60)
    try:
        overview = service.overview(budget_s=120)
        rows = {row["run"]: row for row in overview["runs"]}
        assert rows["job/rank_3"]["analysis"] == triage.ONLINE
        assert service._reader.is_heads_only("job/rank_3") and not service._reader.is_heads_only("job/rank_1")
        assert "train/grad_norm" in service.tags("job/rank_3")["scalars"]
        assert service._reader.is_heads_only("job/rank_3")  # tags and the overview need no points
        served = service.series("job/rank_3", "train/grad_norm", 50, None, None)
        assert not service._reader.is_heads_only("job/rank_3")
    finally:
        service.stop()
    whole = reader_of(job_logdir, False).run("job/rank_3")
    assert served == series_payload("job/rank_3", "train/grad_norm", whole, 50, None, None)


def test_reading_in_full_what_was_appended_since_the_refresh_is_a_new_version(tmp_path):
    steps = np.arange(1, 51)
    rank_dir = tmp_path / "logdir" / "job" / "rank_1"
    write_rank(rank_dir, {contract.LEARNING_RATE: (steps, WALL_TIME_START + steps, np.full(steps.size, 1e-3))})
    reader = reader_of(tmp_path / "logdir", True)
    before = reader.version("job/rank_1")
    assert len(reader.run("job/rank_1").scalars[contract.LEARNING_RATE]) == 2  # heads only
    later = np.arange(51, 61)
    write_rank(tmp_path / "more", {contract.LEARNING_RATE: (later, WALL_TIME_START + later, np.full(later.size, 1e-4))})
    (event_file,) = rank_dir.iterdir()
    with open(event_file, "ab") as out:  # the writer appends after the refresh read the file
        out.write(next((tmp_path / "more").iterdir()).read_bytes())
    assert reader.read_in_full(["job/rank_1", "job/unknown"]) == ["job/rank_1"]
    assert reader.version("job/rank_1") != before
    assert len(reader.run("job/rank_1").scalars[contract.LEARNING_RATE]) == 60
    assert not reader.refresh()  # nothing left unread
