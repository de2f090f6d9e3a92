"""Runs being written while the plugin and `tb-health check` read them.

A real writer (TensorBoard's `EventFileWriter` in a subprocess, rotating its file now and then)
appends while the routes are polled through TensorBoard's WSGI app and `tb-health check` runs:
at every moment the steps are a gap-free, duplicate-free prefix of what was written, everything
the writer had flushed is there, and no report errors. Files replaced, deleted or rotated and
runs that vanish are then followed without stale results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"
REPO = Path(__file__).resolve().parents[1]
STATUSES = {"healthy", "warning", "critical", "no_data", "pending"}
TOTAL_STEPS, FLUSH_EVERY, ROTATE_EVERY = 2400, 40, 800
WAIT_S = 60.0

WRITER = """
import sys, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
run_dir, total, flush_every, rotate_every = sys.argv[1], *map(int, sys.argv[2:5])
writer = EventFileWriter(run_dir, max_queue_size=5, flush_secs=3600)
for step in range(1, total + 1):
    value = Summary.Value(tag="train/loss", simple_value=1.0 / (1.0 + step / 100.0))
    writer.add_event(Event(wall_time=1767000000.0 + step, step=step, summary=Summary(value=[value])))
    if step % flush_every == 0:
        writer.flush()
        print(step, flush=True)
        time.sleep(0.03)
    if step % rotate_every == 0 and step < total:
        writer.close()  # a new file, as a resumed or size-rotated writer starts
        writer = EventFileWriter(run_dir, max_queue_size=5, flush_secs=3600)
writer.close()
print("done", flush=True)
"""


def expected_loss(steps) -> np.ndarray:
    return (1.0 / (1.0 + np.asarray(steps, dtype=np.float64) / 100.0)).astype(np.float32).astype(np.float64)


def strict_json(text: str):
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))


class Plugin:
    """TensorBoard's WSGI app over one HealthPlugin, with a fast refresher, stopped at the end."""

    def __init__(self, logdir: Path) -> None:
        self.plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))
        self.service = self.plugin._service
        self.service.refresh_interval_s = 0.05
        self.client = Client(application.TensorBoardWSGI([self.plugin]))

    def get(self, route: str, expect: int = 200, **params):
        path = f"{PREFIX}/{route}" + ("?" + urlencode(params, quote_via=quote) if params else "")
        response = self.client.get(path)
        text = response.get_data(as_text=True)
        assert response.status_code == expect, f"{path}: {response.status_code} {text[:300]}"
        if expect >= 400:  # TensorBoard's answer to a tensorboard.errors.* raised by the route: plain text
            return {"error": text}
        return strict_json(text)

    def settle(self) -> None:
        """Wait for a refresh that started after now (what was on disk is then read)."""
        self.service.start()
        target = self.service.refresh_count + 2
        deadline = time.monotonic() + WAIT_S
        while self.service.refresh_count < target:
            assert time.monotonic() < deadline, "the refresher stalled"
            time.sleep(0.01)

    def series(self, run: str, tag: str = "train/loss") -> tuple[list[int], list[float]]:
        body = self.get("series", run=run, tag=tag, width=20000)
        assert not body["downsampled"]
        return body["steps"], body["mean"]

    def close(self) -> None:
        self.service.stop()


@pytest.fixture()
def plugin_factory():
    made: list[Plugin] = []

    def make(logdir: Path) -> Plugin:
        made.append(Plugin(logdir))
        return made[-1]

    yield make
    for plugin in made:
        plugin.close()


def start_check(logdir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir), "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def finish_check(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=120)
    assert process.returncode in (0, 1), err[-2000:]
    return strict_json(out)


def test_a_run_being_written_is_read_consistently_at_every_moment(tmp_path, plugin_factory):
    logdir = tmp_path / "logs"
    run_dir = logdir / "live"
    run_dir.mkdir(parents=True)
    write_scalars(logdir / "quiet", {"train/loss": (range(100), expected_loss(range(100)))})
    plugin = plugin_factory(logdir)
    plugin.get("runs")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir), str(TOTAL_STEPS), str(FLUSH_EVERY), str(ROTATE_EVERY)],
        stdout=subprocess.PIPE, text=True,
    )
    flushed = [0]

    def follow_writer():
        for line in writer.stdout:
            if line.strip().isdigit():
                flushed[0] = int(line)

    follower = threading.Thread(target=follow_writer, daemon=True)
    follower.start()
    checks: list[tuple[int, subprocess.Popen]] = []
    polls, last_len = 0, 0
    try:
        while writer.poll() is None or polls == 0:
            flushed_before = flushed[0]
            if len(checks) < 2 and flushed_before >= TOTAL_STEPS * len(checks) // 3:
                checks.append((flushed_before, start_check(logdir)))
            plugin.settle()
            runs = {r["run"]: r for r in plugin.get("runs")["runs"]}
            assert runs["quiet"]["steps"] == {"first": 0, "last": 99}
            assert all(r["status"] in STATUSES for r in runs.values())
            if "live" not in runs:  # no event file yet
                assert flushed_before == 0
                continue
            if flushed_before == 0 and not runs["live"]["steps"]:
                continue  # the writer's first file holds only its header event yet: no tag to chart
            steps, values = plugin.series("live")
            assert steps == list(range(1, len(steps) + 1)), "steps must be a gap-free, duplicate-free prefix"
            assert len(steps) >= flushed_before, "a flushed point is missing"
            assert len(steps) >= last_len, "steps went backwards between two polls"
            np.testing.assert_allclose(values, expected_loss(steps), rtol=1e-6)
            (report,) = plugin.get("report", run="live")["runs"]
            assert report["status"] in STATUSES - {"pending"}
            assert report["steps"]["first"] == 1 and report["steps"]["last"] >= len(steps)
            last_len = len(steps)
            polls += 1
        assert writer.wait(timeout=60) == 0
        follower.join(timeout=10)
        plugin.settle()
        steps, values = plugin.series("live")
        assert steps == list(range(1, TOTAL_STEPS + 1))
        for flushed_at_start, process in checks:
            report = {r["run"]: r for r in finish_check(process)["runs"]}
            live = report.get("live")
            if flushed_at_start:
                assert live["steps"]["first"] == 1 and live["steps"]["last"] >= flushed_at_start
        final = {r["run"]: r for r in finish_check(start_check(logdir))["runs"]}
        assert final["live"]["steps"] == {"first": 1, "last": TOTAL_STEPS}
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        for _, process in checks:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert polls >= 5, f"only {polls} polls while writing"
    print(f"\nlive_logs: {polls} consistent polls while {TOTAL_STEPS} steps were written in "
          f"{TOTAL_STEPS // ROTATE_EVERY} files; {len(checks) + 1} tb-health check runs")


def _event_file(run_dir: Path) -> Path:
    (path,) = [p for p in run_dir.iterdir() if "tfevents" in p.name]
    return path


def test_a_file_replaced_under_the_same_name_is_read_afresh(tmp_path, plugin_factory):
    """rsync and other copy tools replace a log file by renaming a new one over it."""
    logdir = tmp_path / "logs"
    write_scalars(logdir / "run", {"train/loss": (range(1, 101), np.full(100, 5.0))})
    target = _event_file(logdir / "run")
    plugin = plugin_factory(logdir)
    plugin.settle()
    assert plugin.series("run")[0] == list(range(1, 101))
    for count, value in ((150, 1.0), (150, 2.0)):  # longer, then the same size
        fresh = write_scalars(tmp_path / f"fresh{value}", {"train/loss": (range(1, count + 1), np.full(count, value))})
        os.replace(_event_file(fresh), target)
        plugin.settle()
        steps, values = plugin.series("run")
        assert steps == list(range(1, count + 1)) and set(values) == {value}, f"stale points after replacing with {value}"
        (report,) = plugin.get("report", run="run")["runs"]
        assert report["steps"] == {"first": 1, "last": count}


def test_deleted_and_rotated_files_and_vanishing_runs(tmp_path, plugin_factory):
    logdir = tmp_path / "logs"
    run_dir = logdir / "exp" / "rank_0"
    first = _event_file(write_scalars(run_dir, {"train/loss": (range(1, 101), expected_loss(range(1, 101)))}))
    time.sleep(1.05)  # the next file's name carries a later second: it sorts after the first
    second_dir = write_scalars(tmp_path / "next", {"train/loss": (range(101, 201), expected_loss(range(101, 201)))})
    second = run_dir / _event_file(second_dir).name
    shutil.move(str(_event_file(second_dir)), second)
    write_scalars(logdir / "other", {"loss": (range(50), np.ones(50))})
    plugin = plugin_factory(logdir)
    plugin.settle()
    assert plugin.series("exp/rank_0")[0] == list(range(1, 201))

    second.unlink()  # the newer file is deleted: its points must go
    plugin.settle()
    steps, _ = plugin.series("exp/rank_0")
    assert steps == list(range(1, 101))
    assert plugin.get("report", run="exp/rank_0")["runs"][0]["steps"] == {"first": 1, "last": 100}

    first.unlink()  # the run's last file goes: so does the run
    write_scalars(run_dir.parent / "rank_1", {"train/loss": (range(10), np.ones(10))})
    plugin.settle()
    names = {r["run"] for r in plugin.get("runs")["runs"]}
    assert names == {"exp/rank_1", "other"}
    for route in ("report", "tags", "heatmap"):
        assert "unknown run" in plugin.get(route, expect=404, run="exp/rank_0")["error"]
    plugin.get("series", expect=404, run="exp/rank_0", tag="train/loss")

    shutil.rmtree(logdir / "other")  # a run vanishes while being polled
    plugin.settle()
    assert {r["run"] for r in plugin.get("runs")["runs"]} == {"exp/rank_1"}
    write_scalars(logdir / "other", {"loss": (range(5, 8), np.full(3, 9.0))})  # and comes back, different
    plugin.settle()
    steps, values = plugin.series("other", tag="loss")
    assert steps == [5, 6, 7] and values == [9.0, 9.0, 9.0]

    shutil.rmtree(logdir)  # the whole logdir goes away, then returns
    plugin.settle()
    assert plugin.get("runs")["runs"] == []
    write_scalars(logdir / "again", {"loss": (range(3), np.ones(3))})
    plugin.settle()
    assert [r["run"] for r in plugin.get("runs")["runs"]] == ["again"]
