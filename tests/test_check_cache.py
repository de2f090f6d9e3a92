"""`tb-health check --cache DIR` on real event files: the report is byte for byte the uncached one
whatever happened to the files (append, resume, truncation, replacement, runs added or deleted,
a live writer's unfinished record, a damaged cache, concurrent checks), and a re-check reads only
the appended bytes and analyses only the units that changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tb_health_plugin.analysis import engine
from tb_health_plugin.cli import main
from tb_health_plugin.readers import logdir_reader
from tb_health_plugin.tfrecord import frame, masked_crc
from tests.readers_fixtures import event, legacy_histogram_value, scalar_value, tensor_value, write_events

ROOT = Path(__file__).resolve().parents[1]
POINTS = 400


def loss_values(steps: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, int(steps[0])])
    return np.exp(np.log(0.5 + 3.0 * (1 + steps / 300.0) ** -0.7) + 0.02 * rng.standard_normal(steps.size))


def scalar_events(steps, seed: int = 0, tags=("train/loss", "train/lr")) -> list:
    steps = np.asarray(steps)
    loss = loss_values(steps, seed)
    values = {"train/loss": loss, "train/lr": np.full(steps.size, 1e-3), "train/grad_norm": 1.0 + 0.1 * loss}
    return [event(int(step), *(scalar_value(tag, values[tag][i]) for tag in tags)) for i, step in enumerate(steps)]


def append_events(path: Path, events) -> None:
    with open(path, "ab") as out:
        out.write(b"".join(frame(e.SerializeToString()) for e in events))


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Two ranks of a job, a single run with histograms and text, and a plain run."""
    root = tmp_path / "logs"
    steps = np.arange(1, POINTS + 1) * 10
    for rank in range(2):
        write_events(root / "job" / f"rank_{rank}", scalar_events(steps, seed=rank))
    extras = [event(int(s), legacy_histogram_value("grads/w", np.random.default_rng(int(s)).normal(size=50),
                                                   np.linspace(-4, 4, 9))) for s in steps[::40]]
    extras.append(event(int(steps[-1]), tensor_value("notes", np.array([b"hello"], dtype=object), "text")))
    write_events(root / "mixed", scalar_events(steps, seed=7) + extras)
    write_events(root / "plain", scalar_events(steps, seed=9, tags=("train/loss",)))
    return root


def event_file(run_dir: Path) -> Path:
    (path,) = run_dir.glob("*tfevents*")
    return path


def check_json(capsys, logdir: Path, *options: str) -> tuple[str, str]:
    main(["check", "--format", "json", "--progress", "never", *options, str(logdir)])
    captured = capsys.readouterr()
    return captured.out, captured.err


def assert_cache_agrees(capsys, logdir: Path, cache: Path, *options: str) -> str:
    """The cached report equals the uncached one, byte for byte; returns the cached run's stderr."""
    uncached, _ = check_json(capsys, logdir, *options)
    cached, err = check_json(capsys, logdir, "--cache", str(cache), *options)
    assert cached == uncached
    return err


class ReadSpy:
    """Records (path, offset read from) of each file the reader opens, and the runs analysed."""

    def __init__(self, monkeypatch) -> None:
        self.reads: list[tuple[str, int]] = []
        self.analysed: list[str] = []  # runs handed to the analysis (a unit that changed)
        self.checked: list[str] = []  # runs whose own checks ran
        original_read, original_analyze = logdir_reader.RunState.read_new_bytes, engine.analyze_runs
        original_checks = engine.findings_for_run

        def read_new_bytes(state, event_file):
            known = state.files.get(event_file.path)
            self.reads.append((event_file.path, known.offset if known is not None else 0))
            return original_read(state, event_file)

        def analyze_runs(runs, *args, **kwargs):
            self.analysed += [run.name for run in runs]
            return original_analyze(runs, *args, **kwargs)

        def findings_for_run(signals):
            self.checked.append(signals.run)
            return original_checks(signals)

        monkeypatch.setattr(logdir_reader.RunState, "read_new_bytes", read_new_bytes)
        monkeypatch.setattr(engine, "analyze_runs", analyze_runs)  # `check` imports it on use
        monkeypatch.setattr(engine, "findings_for_run", findings_for_run)


def test_a_recheck_reads_only_appended_bytes_and_analyses_only_changed_units(logdir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    grown = event_file(logdir / "plain")
    size_before = grown.stat().st_size
    append_events(grown, scalar_events(np.arange(POINTS + 1, POINTS + 5) * 10, seed=9, tags=("train/loss",)))
    spy = ReadSpy(monkeypatch)
    cached, _ = check_json(capsys, logdir, "--cache", str(cache))
    assert spy.reads == [(str(grown), size_before)]  # the other files are not even opened
    assert spy.analysed == ["plain"] and spy.checked == ["plain"]
    monkeypatch.undo()
    assert cached == check_json(capsys, logdir)[0]


def test_a_grown_rank_reanalyses_its_whole_job_for_the_cross_rank_checks(logdir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    append_events(event_file(logdir / "job" / "rank_1"), scalar_events(np.arange(POINTS + 1, POINTS + 3) * 10, seed=1))
    spy = ReadSpy(monkeypatch)
    check_json(capsys, logdir, "--cache", str(cache))
    assert sorted(spy.analysed) == ["job/rank_0", "job/rank_1"]  # the cross-rank checks see both
    assert spy.checked == ["job/rank_1"]  # rank 0's own findings come from the cache
    monkeypatch.undo()
    assert_cache_agrees(capsys, logdir, cache)


def test_a_resume_appended_after_a_cached_check_follows_the_resume_rule(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    # The training resumed from step 2000: steps 2000.. are written again, with other values.
    append_events(event_file(logdir / "plain"), scalar_events(np.arange(200, 260) * 10, seed=99, tags=("train/loss",)))
    assert_cache_agrees(capsys, logdir, cache)
    uncached, _ = check_json(capsys, logdir)
    assert '"last": 2590' in uncached  # the abandoned timeline past the resume is gone


def test_truncated_replaced_and_rewritten_files_are_read_again_in_full(logdir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    # Truncated to half, then grown past the old size with other records: same inode, other bytes.
    path = event_file(logdir / "plain")
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    append_events(path, scalar_events(np.arange(1000, 1000 + POINTS) * 10, seed=5, tags=("train/loss",)))
    assert path.stat().st_size > size
    spy = ReadSpy(monkeypatch)
    check_json(capsys, logdir, "--cache", str(cache))
    assert spy.reads == [(str(path), 0)]
    monkeypatch.undo()
    assert_cache_agrees(capsys, logdir, cache)
    # Replaced by another file under the same name (a new inode).
    mixed = event_file(logdir / "mixed")
    other = write_events(tmp_path / "elsewhere", scalar_events(np.arange(1, 50) * 10, seed=3))
    os.replace(other, mixed)
    assert_cache_agrees(capsys, logdir, cache)
    # Rewritten in place, same size: only the contents (and the modification time) change.
    rank = event_file(logdir / "job" / "rank_0")
    data = bytearray(rank.read_bytes())
    replacement = write_events(tmp_path / "again", scalar_events(np.arange(1, POINTS + 1) * 10, seed=42)).read_bytes()
    assert len(replacement) == len(data)
    with open(rank, "r+b") as handle:
        handle.write(replacement)
    os.utime(rank, ns=(rank.stat().st_atime_ns, rank.stat().st_mtime_ns + 1_000_000))
    assert_cache_agrees(capsys, logdir, cache)


def test_new_and_deleted_runs(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    write_events(logdir / "late", scalar_events(np.arange(1, POINTS + 1) * 10, seed=11))
    for path in (logdir / "mixed").iterdir():
        path.unlink()
    (logdir / "mixed").rmdir()
    assert_cache_agrees(capsys, logdir, cache)
    (root,) = cache.iterdir()
    assert len(list((root / "runs").glob("*.state"))) == 4  # mixed's state is gone, late's is there
    left_behind = root / "runs" / ".state-left-by-a-killed-check.state"  # a check stopped mid-write
    left_behind.write_bytes(b"half")
    os.utime(left_behind, (1, 1))
    assert_cache_agrees(capsys, logdir, cache)
    assert not left_behind.exists()


def test_a_live_writers_unfinished_record_waits_and_is_read_once_complete(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    path = event_file(logdir / "plain")
    tail = frame(scalar_events([POINTS * 10 + 10], seed=9, tags=("train/loss",))[0].SerializeToString())
    with open(path, "ab") as out:
        out.write(tail[:10])  # a writer is half-way through its next record
    assert_cache_agrees(capsys, logdir, cache)
    with open(path, "ab") as out:
        out.write(tail[10:])
    assert_cache_agrees(capsys, logdir, cache)


def test_other_language_or_overrides_are_not_served_from_reports_made_for_others(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    assert_cache_agrees(capsys, logdir, cache, "--lang", "zh")
    assert_cache_agrees(capsys, logdir, cache, "--tag", "loss=train/lr")


def test_a_damaged_cache_is_ignored_with_a_note(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    (root,) = cache.iterdir()
    states = sorted((root / "runs").glob("*.state"))
    states[0].write_bytes(b"not a saved state")
    states[1].write_bytes(states[1].read_bytes()[:200])  # cut short
    report = sorted((root / "reports").glob("*.json"))[0]
    report.write_text('{"key": ')
    err = assert_cache_agrees(capsys, logdir, cache)
    for damaged in (states[0], states[1], report):
        assert f"cache file {damaged} ignored: unreadable" in err
    assert "Traceback" not in err
    # Every unit's reports gone, every run's own findings damaged: all is analysed again.
    for report in (root / "reports").glob("*.json"):
        report.unlink()
    findings = sorted((root / "findings").glob("*.json"))
    for path in findings:
        saved = json.loads(path.read_text())
        path.write_text(json.dumps({**saved, "findings": [{"severity": "dire"}]}))  # the right key, bad content
    err = assert_cache_agrees(capsys, logdir, cache)
    assert len(findings) == 4 and all(f"cache file {path} ignored: unreadable" in err for path in findings)
    err = assert_cache_agrees(capsys, logdir, cache)  # rewritten whole by the checks that ignored them
    assert "ignored" not in err


def test_a_cache_written_by_another_version_is_not_used(logdir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    from tb_health_plugin.commands import check_cache

    monkeypatch.setattr(check_cache, "_code_fingerprint", "another version")
    spy = ReadSpy(monkeypatch)
    check_json(capsys, logdir, "--cache", str(cache))
    assert all(offset == 0 for _, offset in spy.reads) and len(spy.reads) == 4
    assert len(spy.analysed) == 4 and len(spy.checked) == 4


def test_concurrent_checks_sharing_a_cache_while_a_run_grows(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "tb_health_plugin.cli", "check", "--format", "json", "--progress", "never",
               "--cache", str(cache), str(logdir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    checks = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    path = event_file(logdir / "plain")
    for start in range(POINTS + 1, POINTS + 201, 20):  # a training logging while the checks run
        append_events(path, scalar_events(np.arange(start, start + 20) * 10, seed=9, tags=("train/loss",)))
    results = [check.communicate(timeout=600) for check in checks]
    assert all(check.returncode in (0, 1) for check in checks)
    assert all(b"Traceback" not in err for _, err in results)
    assert all(out.startswith(b"{") for out, _ in results)
    assert_cache_agrees(capsys, logdir, cache)


def test_cached_reports_of_a_url_logdir_are_not_attempted(tmp_path, capsys):
    code = main(["check", "--cache", str(tmp_path / "cache"), "--progress", "never", "memory://nothing-here"])
    err = capsys.readouterr().err
    assert "--cache is used for local logdirs only" in err
    assert code == 2 and not (tmp_path / "cache").exists()


def test_damage_in_the_logs_is_said_and_sets_the_exit_code_on_every_cached_check(logdir, tmp_path):
    """Runs with damaged records are read in full each time: the warning and exit code 2 repeat."""
    path = event_file(logdir / "plain")
    append_events(path, scalar_events([POINTS * 10 + 10], seed=9, tags=("train/loss",)))
    header = (1 << 30).to_bytes(8, "little")  # a length that lies: far more than the file holds
    with open(path, "ab") as out:
        out.write(header + masked_crc(header).to_bytes(4, "little") + b"lost")
    append_events(path, scalar_events([POINTS * 10 + 20], seed=9, tags=("train/loss",)))
    command = [sys.executable, "-m", "tb_health_plugin.cli", "check", "--format", "json", "--progress", "never"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    uncached = subprocess.run([*command, str(logdir)], capture_output=True, env=env)
    for _ in range(2):  # cold, then warm
        cached = subprocess.run([*command, "--cache", str(tmp_path / "cache"), str(logdir)], capture_output=True, env=env)
        assert (cached.returncode, cached.stdout, cached.stderr) == (uncached.returncode, uncached.stdout, uncached.stderr)
    assert uncached.returncode == 2 and b"claims" in uncached.stderr


def test_an_empty_file_replaced_by_one_with_records_is_read(logdir, tmp_path, capsys):
    empty = logdir / "plain" / "events.out.tfevents.1767000001.later"
    empty.write_bytes(b"")
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    other = write_events(tmp_path / "elsewhere", scalar_events(np.arange(POINTS + 1, POINTS + 40) * 10, seed=9,
                                                               tags=("train/loss",)))
    os.replace(other, empty)
    assert_cache_agrees(capsys, logdir, cache)


def test_mindspore_summaries_written_by_a_real_training_grow_and_recheck_the_same(tmp_path_factory, tmp_path, capsys):
    """MindSpore's own files (scalars, histograms with NaN/Inf counts, tensors): the second half
    of what its `SummaryRecord` wrote arrives after a cached check, as from a live training."""
    import shutil

    from tests.readers_fixtures import mindspore_training_logs, record_offsets

    logdir = tmp_path / "ms"
    shutil.copytree(mindspore_training_logs(tmp_path_factory), logdir)
    (summary,) = (logdir / "record").glob("*_MS")
    whole = summary.read_bytes()
    records = record_offsets(summary)
    cut = records[len(records) // 2][0]
    summary.chmod(0o600)  # MindSpore closes its files read-only
    summary.write_bytes(whole[:cut])
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache)
    with open(summary, "ab") as out:
        out.write(whole[cut:])
    assert_cache_agrees(capsys, logdir, cache)
    (root,) = cache.iterdir()
    assert len(list((root / "runs").glob("*.state"))) == 2  # both MindSpore runs were cached


def test_a_reader_note_restored_from_the_cache_is_written_as_a_fresh_one_in_every_language(tmp_path, capsys):
    """A run of two concurrent writers carries a `multiple_writers` note whose Chinese sentence is
    written from its figures: when the run grows, its analysis runs again on the state restored
    from the cache, whose note must still have them."""
    root = tmp_path / "logs"
    writers = ((".a", 0.0, 1.0), (".b", 0.5, 2.0))  # the same steps, meanwhile

    def events(steps, wall_offset, value):
        return [event(step, scalar_value("loss", value + 0.01 * np.sin(step)),
                      wall_time=1_767_000_000.0 + step + wall_offset) for step in steps]

    for suffix, wall_offset, value in writers:
        write_events(root / "run", events(range(100), wall_offset, value), suffix=suffix)
    cache = tmp_path / "cache"
    check_json(capsys, root, "--cache", str(cache), "--lang", "zh")
    for path, (_, wall_offset, value) in zip(sorted((root / "run").glob("*tfevents*")), writers, strict=True):
        append_events(path, events(range(100, 110), wall_offset, value))
    assert_cache_agrees(capsys, root, cache, "--lang", "zh")
    cached, _ = check_json(capsys, root, "--cache", str(cache), "--lang", "zh")
    (run,) = json.loads(cached)["runs"]
    assert "multiple_writers" in [f["kind"] for f in run["findings"]]


def test_the_cache_notes_are_written_in_the_checks_language(logdir, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert_cache_agrees(capsys, logdir, cache, "--lang", "zh")
    (root,) = cache.iterdir()
    damaged = sorted((root / "runs").glob("*.state"))[0]
    damaged.write_bytes(b"not a saved state")
    err = assert_cache_agrees(capsys, logdir, cache, "--lang", "zh")
    assert f"已忽略缓存文件 {damaged}：无法读取" in err and "ignored" not in err
