"""The plugin's worker process, in a real `tensorboard`: reading and analysis off the request path.

TensorBoard loads the plugin with its flags, so the plugin reads and analyses in a worker
process (`tb_health_plugin/worker.py`). These tests find that process under TensorBoard's, freeze
it, kill it and kill TensorBoard, and check what the routes answer meanwhile. Every wait is for
an event (a route's answer, a process gone), never for a length of time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tb_health_plugin.tfrecord import frame
from tests.browser import HealthTab, browser_page
from tests.eventlogs import WALL_TIME_START, write_scalars
from tests.tensorboard_server import get_json, running_tensorboard

PREFIX = "/data/plugin/health"
WORKER_MODULE = b"tb_health_plugin.worker_process"
WAIT_S = 600  # generous: the machine is shared; a wait ends at its event, not at this limit


def wait_for(predicate, what: str, timeout_s: float = WAIT_S, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(interval_s)


# ----- processes


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Running and not a zombie (a dead child its parent has not reaped yet counts as gone)."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False


def server_pid(base: str) -> int:
    port = base.rsplit(":", 1)[1].encode()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in args and args[args.index(b"--port") + 1] == port:
            return int(entry)
    raise AssertionError("tensorboard process not found")


def workers_of(pid: int) -> list[int]:
    """Live processes started by `pid` that run the plugin's worker."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(_stat_fields(int(entry))[1]) != pid:
                continue
            if WORKER_MODULE in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def worker_pid_of(base: str) -> int:
    pid = server_pid(base)
    found = wait_for(lambda: workers_of(pid), "the plugin's worker started")
    assert len(found) == 1, f"one worker per plugin, found {found}"
    return found[0]


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process stopped (as if busy for ever) until the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# ----- logs


def append_loss(run_dir: Path, steps: np.ndarray, values: np.ndarray) -> None:
    """Legacy scalar events appended as a second event file of the run (TFRecord framing).

    Written whole under another name and renamed, so the worker sees the file in one piece: the
    tests here are about one append, not about a file read while it is being written."""
    parts = []
    for step, value in zip(steps.tolist(), values.tolist(), strict=True):
        summary = Summary(value=[Summary.Value(tag="train/loss", simple_value=value)])
        payload = Event(wall_time=WALL_TIME_START + step, step=step, summary=summary).SerializeToString()
        parts.append(frame(payload))
    partial = run_dir / "appending.tmp"
    partial.write_bytes(b"".join(parts))
    os.replace(partial, run_dir / "events.out.tfevents.1767000999.appended")


def small_logs(root: Path) -> Path:
    steps = np.arange(300)
    loss = 3.0 * np.exp(-steps / 100.0) + 0.5
    write_scalars(root / "exp" / "rank_0", {"train/loss": (steps, loss), "train/lr": (steps, np.full(300, 1e-3))})
    write_scalars(root / "exp" / "rank_1", {"train/loss": (steps, loss * 1.01)})
    spiky = loss.copy()
    spiky[200] = 40.0
    write_scalars(root / "spiky", {"loss": (steps, spiky)})
    return root


def holding_analyses_on(hold: Path) -> dict[str, str]:
    """The environment of a TensorBoard whose worker starts no analysis while `hold` exists
    (`tests/hold_analysis/sitecustomize.py`)."""
    hook = str(Path(__file__).parent / "hold_analysis")
    path = os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, TB_HEALTH_TEST_HOLD_ANALYSIS=str(hold))


def runs_of(base: str) -> dict:
    return get_json(f"{base}{PREFIX}/runs", timeout=120)


def all_analysed(base: str) -> dict | None:
    body = runs_of(base)
    return body if body["analysis"]["state"] == "idle" and body["runs"] else None


# ----- tests


@pytest.mark.parametrize("load_fast", [False, True], ids=["python-loader", "data-server"])
def test_the_runs_route_answers_while_a_long_analysis_runs(tmp_path, load_fast):
    """New data whose analysis takes long: `runs` answers meanwhile with the last complete report,
    the run marked `analysing`, and then with the new report."""
    logdir, hold = small_logs(tmp_path / "logs"), tmp_path / "hold"
    with running_tensorboard(logdir, load_fast=load_fast, env=holding_analyses_on(hold)) as base:
        wait_for(lambda: all_analysed(base), "every run analysed")
        before = {r["run"]: r for r in runs_of(base)["runs"]}
        assert before["spiky"]["steps"] == {"first": 0, "last": 299} and not before["spiky"]["analysing"]
        # an analysis as long as this test needs: held until `hold` is removed (a fast analysis
        # on a loaded machine was over before a request saw it)
        hold.touch()
        steps = np.arange(300, 3_300)
        append_loss(logdir / "spiky", steps, np.random.default_rng(0).random(steps.size) + 0.5)

        def seen_analysing():
            body = runs_of(base)
            spiky = next(r for r in body["runs"] if r["run"] == "spiky")
            return body if spiky["analysing"] else None

        during = wait_for(seen_analysing, "the new data listed while it is analysed")
        spiky = next(r for r in during["runs"] if r["run"] == "spiky")
        assert during["analysis"]["state"] == "analysing"
        assert during["analysis"]["done"] < during["analysis"]["total"]
        assert spiky["steps"] == {"first": 0, "last": 299}  # the last complete report, not a blank row
        assert spiky["status"] == before["spiky"]["status"]
        assert {r["run"] for r in during["runs"]} == set(before)

        hold.unlink()
        after = wait_for(lambda: all_analysed(base), "the new data analysed")
        spiky = next(r for r in after["runs"] if r["run"] == "spiky")
        assert spiky["steps"] == {"first": 0, "last": 3_299} and not spiky["analysing"]


def test_routes_answer_from_what_was_analysed_while_the_worker_is_frozen(tmp_path):
    """A worker busy for as long as it takes (here: stopped) does not hold up `runs`, `report`
    or `tags`: they answer from the last listing and reports."""
    small_logs(tmp_path)
    with running_tensorboard(tmp_path) as base:
        analysed = wait_for(lambda: all_analysed(base), "every run analysed")
        report = get_json(f"{base}{PREFIX}/report?run=spiky")
        tags = get_json(f"{base}{PREFIX}/tags?run=exp%2Frank_0")
        with frozen(worker_pid_of(base)):
            assert runs_of(base)["runs"] == analysed["runs"]
            assert get_json(f"{base}{PREFIX}/report?run=spiky") == report
            assert get_json(f"{base}{PREFIX}/report?run=spiky&lang=zh")["language"] == "zh"
            assert get_json(f"{base}{PREFIX}/tags?run=exp%2Frank_0") == tags
            with pytest.raises(urllib.error.HTTPError) as missing:
                get_json(f"{base}{PREFIX}/tags?run=nope")
            assert missing.value.code == 404
        # what needs the points is asked of the worker, which answers again once it runs
        series = get_json(f"{base}{PREFIX}/series?run=spiky&tag=loss&width=50")
        assert series["run"] == "spiky" and series["tag"] == "loss"


def test_a_worker_that_dies_is_restarted_and_the_tab_keeps_its_runs(tmp_path):
    small_logs(tmp_path)
    with running_tensorboard(tmp_path) as base:
        analysed = wait_for(lambda: all_analysed(base), "every run analysed")
        assert analysed["worker"] is None
        first = worker_pid_of(base)
        os.kill(first, signal.SIGKILL)
        # every answer meanwhile lists the runs analysed before: the tab never goes blank
        def restarted():
            body = runs_of(base)
            assert {r["run"] for r in body["runs"]} == {r["run"] for r in analysed["runs"]}
            return body if body["worker"] and body["worker"]["state"] == "running" else None

        body = wait_for(restarted, "a new worker")
        assert body["worker"]["restarts"] == 1 and body["worker"]["exit_code"] == -signal.SIGKILL
        second = worker_pid_of(base)
        assert second != first and not alive(first)
        series = get_json(f"{base}{PREFIX}/series?run=spiky&tag=loss&width=50")  # the new worker serves points
        assert series["run"] == "spiky"
        with browser_page() as page:  # the tab says so above the runs, in its own words
            tab = HealthTab(page, base).open()
            tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length === 3")
            notice = tab.wait_until("w => { const b = w.document.querySelector('.worker-notice');"
                                    " return b && !b.hidden && b.textContent; }")
            assert "restarted (1×, last exit code -9)" in notice


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill", "term", "interrupt"])
def test_no_worker_outlives_tensorboard(tmp_path, how):
    small_logs(tmp_path)
    with running_tensorboard(tmp_path) as base:
        server = server_pid(base)
        # started with TensorBoard, before any request of the tab: the logdir is read meanwhile
        assert workers_of(server)
        worker = worker_pid_of(base)
        os.kill(server, how)  # TensorBoard alone, not its process group
        wait_for(lambda: not alive(server), "tensorboard exited")
        wait_for(lambda: not alive(worker), "the worker exited with tensorboard")


def test_the_worker_names_the_runs_before_it_reads_them(tmp_path):
    """The worker's first message lists the runs by name alone, before a point is read: a run of
    millions of points is listed (pending) while it is being read."""
    import socket
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    small_logs(tmp_path)
    ours, theirs = socket.socketpair()
    process = subprocess.Popen([sys.executable, "-m", "tb_health_plugin.worker_process", str(theirs.fileno()),
                                str(tmp_path), "3600"], pass_fds=(theirs.fileno(),))
    theirs.close()
    conn = Connection(ours.detach())
    try:
        kind, first = conn.recv()
        assert kind == "listing" and first["partial"] and first["changed"] == {}
        assert first["names"] == ["exp/rank_0", "exp/rank_1", "spiky"]
        kind, second = conn.recv()
        assert kind == "listing" and not second.get("partial")
        assert set(second["changed"]) == set(first["names"])
        assert second["changed"]["spiky"]["tags"]["signals"] == {"loss": "loss"}
    finally:
        conn.close()  # the worker sees its socket close and exits
        assert process.wait(timeout=WAIT_S) == 0


def test_runs_listed_but_not_yet_read_are_pending_rows(tmp_path):
    from tb_health_plugin.worker import WorkerService

    service = WorkerService(str(tmp_path))
    service._stopped.set()  # no worker: the messages below are what a worker sends first
    service._handle(("listing", {"names": ["big", "small"], "changed": {}, "partial": True}))
    body = service.overview(budget_s=0)
    assert [(r["run"], r["status"]) for r in body["runs"]] == [("big", "pending"), ("small", "pending")]


def test_while_every_run_has_a_report_runs_answers_with_the_last_overview_built(tmp_path):
    """During a re-analysis new reports arrive twice a second: a request answers with the last
    overview at once, and the next one is assembled off the request."""
    from tb_health_plugin.analysis import engine
    from tb_health_plugin.run_data import RunData, ScalarSeries
    from tb_health_plugin.worker import WorkerService

    def raw_report(last_step: int) -> dict:
        steps = np.arange(last_step + 1)
        data = RunData("a", scalars={"loss": ScalarSeries.from_lists(steps, 1.0 / (1 + steps))})
        return engine.analyze_runs([data], lang=None)[0]

    service = WorkerService(str(tmp_path))
    service._stopped.set()  # no worker: the messages below are what a worker sends
    meta = {"version": 1, "tags": {"signals": {"loss": "loss"}}, "last_update": None, "source": None}
    config = {"file": None, "tags": {}, "error": None}
    service._handle(("listing", {"names": ["a"], "changed": {"a": meta}, "config": config, "storage": None}))
    service._handle(("reports", {"a": {"version": 1, "report": raw_report(99)}}))
    first = service.overview()
    assert first["runs"][0]["steps"] == {"first": 0, "last": 99}
    service._handle(("listing", {"names": ["a"], "changed": {"a": {**meta, "version": 2}}, "config": config,
                                 "storage": None}))
    service._handle(("reports", {"a": {"version": 2, "report": raw_report(199)}}))
    assert service.overview() is first  # not waiting for the rebuild
    fresh = wait_for(lambda: service.overview() is not first and service.overview(), "the next overview built")
    assert fresh["runs"][0]["steps"] == {"first": 0, "last": 199}
