"""The plugin's data layer inside TensorBoard: reading and analysis in a worker process.

TensorBoard serves requests on threads of one interpreter, which its own Python loader
(`--load_fast=false`) also uses; reading and analysing a big logdir there slows every route and
TensorBoard's loading alike. So the plugin starts a worker process (`worker_process`, a fresh
interpreter: TensorBoard runs threads, which a fork would copy in whatever state they are) when
TensorBoard loads it (so the logdir is read while TensorBoard starts and loads it too, not from
the tab's first request on; a request starts it too, should it not run), and its request
threads answer from what the worker last sent: each run's
tags and roles, and its last complete report (findings, no points). Runs whose newer data is
being analysed say so (`analysing`), runs never analysed are `pending`.

What needs the points (a chart's `series`, the `heatmap`, an export) is asked of the worker and
waited for. If the worker dies it is started again (after a pause that grows while it keeps
dying), the `runs` route says so meanwhile and the results sent before stay served. It stops
when TensorBoard exits: at exit we ask it to; and if TensorBoard is killed, the worker sees its
socket close and exits on its own.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tensorboard import errors

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.render import render_run_report
from tb_health_plugin.answers import OverviewRows, RunEntry
from tb_health_plugin.service import (
    FIRST_REFRESH_WAIT_S,
    REFRESH_INTERVAL_S,
    RUNS_ANALYSIS_BUDGET_S,
    UnknownRun,
)

logger = logging.getLogger(__name__)

FIRST_ANALYSIS_GRACE_S = 2.0  # the first `runs` gives first analyses at least this long after the runs are read
CALL_TIMEOUT_S = 600.0  # a call (an export of many runs) that takes longer is given up
RESTART_FIRST_S = 1.0  # pause before restarting a worker that died, doubled while it keeps dying
RESTART_MAX_S = 60.0
STABLE_S = 60.0  # a worker that lived this long died by accident, not at start: restart at once
STOP_WAIT_S = 5.0  # how long a stopped worker may take to exit before it is killed


class WorkerUnavailable(errors.PublicError):
    """The worker died during the call, or is being restarted: 503, the tab retries."""

    http_code = 503

    def __init__(self, message: str) -> None:
        super().__init__(message)


_REMOTE_ERRORS = {"not_found": errors.NotFoundError, "invalid_argument": errors.InvalidArgumentError}


class _Call:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.result: Any = None


class WorkerService:
    """What `HealthPlugin` asks (`overview`, `report_response`, `tags`, `series`, `heatmap`,
    `health_report`, `storage_status`), answered from the worker's last messages or by a call."""

    def __init__(self, logdir: str, refresh_interval_s: float = REFRESH_INTERVAL_S) -> None:
        self.logdir = logdir
        self.refresh_interval_s = refresh_interval_s
        self._cond = threading.Condition()  # guards the state below; held briefly
        self._names: list[str] | None = None  # None until the first listing
        self._reading: dict[str, int] | None = None  # the first read's last progress report
        self._read_at = 0.0  # and of the first full listing (every run read)
        self._meta: dict[str, dict[str, Any]] = {}  # run -> version, tags, last_update, source
        self._reports: dict[str, dict[str, Any]] = {}  # run -> {"version", "report"}
        self._config: dict[str, Any] = {"file": None, "tags": {}, "error": None}
        self._storage: dict[str, Any] | None = None
        self._generation = 0  # bumped by every message that changes what `runs` shows
        self._overview: dict[str, tuple[int, dict[str, Any]]] = {}  # lang -> (generation, response)
        self._rows = OverviewRows()
        self._build_lock = threading.Lock()
        self._wanted: set[str] = set()  # languages whose overview the background builder keeps current
        self._builder: threading.Thread | None = None
        self._rebuild = threading.Event()
        # the worker
        self._start_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._calls: dict[int, _Call] = {}
        self._call_ids = itertools.count()
        self._stopped = threading.Event()
        self._started_at = 0.0
        self._restart_wait_s = RESTART_FIRST_S
        self.restarts = 0
        self._last_exit: int | None = None
        self._restarting = False
        atexit.register(self.stop)

    # ----- the worker's life

    def start(self) -> None:
        """Start the worker unless it runs (or is being restarted, or we were stopped)."""
        with self._start_lock:
            if self._process is not None or self._stopped.is_set():
                return
            ours, theirs = socket.socketpair()
            env = dict(os.environ)
            package_root = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
            command = [sys.executable, "-m", "tb_health_plugin.worker_process", str(theirs.fileno()),
                       self.logdir, str(self.refresh_interval_s)]
            try:
                process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
            finally:
                theirs.close()
            self._process, self._conn, self._started_at = process, Connection(ours.detach()), time.monotonic()
            self._restarting = False
            threading.Thread(target=self._receive, args=(process, self._conn), name="tb-health-worker-receive",
                             daemon=True).start()

    def stop(self) -> None:
        """Ask the worker to exit and wait for it (killed if it does not); no restart after."""
        self._stopped.set()
        with self._start_lock:
            process, conn = self._process, self._conn
        if process is None:
            return
        try:
            with self._send_lock:
                conn.send(("stop",))
        except OSError:
            pass
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _receive(self, process: subprocess.Popen, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            try:
                self._handle(message)
            except Exception:  # noqa: BLE001 - one bad message must not stop the receiving
                logger.exception("tb-health: bad message from the worker")
        code = process.wait()
        conn.close()
        self._worker_ended(code)

    def _worker_ended(self, code: int) -> None:
        with self._start_lock:
            self._process = self._conn = None
            pending, self._calls = self._calls, {}
            stopped = self._stopped.is_set()
            if not stopped:
                self._last_exit, self._restarting = code, True
                lived = time.monotonic() - self._started_at
                self._restart_wait_s = (RESTART_FIRST_S if lived > STABLE_S
                                        else min(RESTART_MAX_S, self._restart_wait_s * 2))
                wait_s = 0.0 if lived > STABLE_S else self._restart_wait_s
        for call in pending.values():
            call.result = ("unavailable", f"the analysis worker exited (code {code})")
            call.done.set()
        if stopped:
            return
        logger.warning("tb-health: the analysis worker exited (code %s); restarting in %.0f s", code, wait_s)
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
        if not self._stopped.wait(wait_s):
            self.restarts += 1
            self.start()

    def _handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "reply":
            _, call_id, ok, result = message
            with self._start_lock:
                call = self._calls.pop(call_id, None)
            if call is not None:
                call.ok, call.result = ok, result
                call.done.set()
            return
        with self._cond:
            if kind == "reading":  # the first read's progress (`PublishingService._send_reading`)
                self._reading = message[1]
                return
            if kind == "listing":
                changed = self._take_listing(message[1])
            else:
                changed = kind == "reports"
                if changed:
                    self._reports.update(message[1])
            if changed:  # a refresh that found nothing new keeps the overview built before
                self._generation += 1
            self._cond.notify_all()

    def _take_listing(self, listing: dict[str, Any]) -> bool:
        """Take a listing in (call with `_cond` held); whether it changed anything shown."""
        before = (self._names, self._config, self._read_at)
        self._names = listing["names"]
        self._meta.update(listing["changed"])
        if not listing.get("partial"):  # names only, before the runs are read: nothing is gone
            self._read_at = self._read_at or time.monotonic()
            live = set(self._names)
            for gone in set(self._meta) - live:
                del self._meta[gone]
            for gone in set(self._reports) - live:
                del self._reports[gone]
            self._config, self._storage = listing["config"], listing["storage"]
        return bool(listing["changed"]) or before != (self._names, self._config, self._read_at)

    def _call(self, method: str, *args: Any) -> Any:
        self.start()
        call = _Call()
        with self._start_lock:
            conn = self._conn
            if conn is None:
                raise WorkerUnavailable("the analysis worker is being restarted; try again in a moment")
            call_id = next(self._call_ids)
            self._calls[call_id] = call
        try:
            with self._send_lock:
                conn.send(("call", call_id, method, args))
        except OSError:
            pass  # the worker is dying: the receiver fails the call
        if not call.done.wait(CALL_TIMEOUT_S):
            with self._start_lock:
                self._calls.pop(call_id, None)
            raise WorkerUnavailable(f"the analysis worker did not answer {method} in {CALL_TIMEOUT_S:.0f} s")
        if call.ok:
            return call.result
        kind, text = call.result
        if kind == "unavailable":
            raise WorkerUnavailable(text)
        raise _REMOTE_ERRORS.get(kind, RuntimeError)(text)

    # ----- queries answered from the worker's last messages

    def _listed(self) -> list[str]:
        """The run names of the last listing, waiting for the first one."""
        self.start()
        with self._cond:
            self._cond.wait_for(lambda: self._names is not None or self._restarting, FIRST_REFRESH_WAIT_S)
            return list(self._names or [])

    def run_names(self) -> list[str]:
        return self._listed()

    def overview(self, budget_s: float = RUNS_ANALYSIS_BUDGET_S, lang: str = "en") -> dict[str, Any]:
        """The `runs` route's body from the last listing and reports. Only the first requests
        wait, and within `budget_s`: for the runs to be read (a run still being read is listed
        `pending`), then for runs never analysed (at least `FIRST_ANALYSIS_GRACE_S` after the
        reading, if it ended within the budget)."""
        started = time.monotonic()
        self._listed()
        with self._cond:
            cached = self._overview.get(lang)
            if cached is not None and self._read_at and all(name in self._reports for name in self._names or []):
                if cached[0] != self._generation:  # newer reports: the next request gets them
                    self._rebuild_later(lang)
                return cached[1]
            self._cond.wait_for(lambda: self._read_at or self._restarting,
                                max(0.0, started + budget_s - time.monotonic()))
            if self._read_at:
                deadline = max(started + budget_s, self._read_at + FIRST_ANALYSIS_GRACE_S)
                self._cond.wait_for(lambda: all(name in self._reports for name in self._names or []),
                                    max(0.0, deadline - time.monotonic()))
        return self._build(lang)

    def _rebuild_later(self, lang: str) -> None:
        """Have the overview in `lang` rebuilt off the request (call with `_cond` held): while
        every run has a report, a request answers with the last one built rather than wait for a
        thousand rows to be assembled (the re-analysis of 1000 runs changes them twice a second)."""
        self._wanted.add(lang)
        if self._builder is None:
            self._builder = threading.Thread(target=self._build_when_asked, name="tb-health-overview", daemon=True)
            self._builder.start()
        self._rebuild.set()

    def _build_when_asked(self) -> None:
        while True:
            self._rebuild.wait()
            self._rebuild.clear()
            with self._cond:
                wanted = list(self._wanted)
            for lang in wanted:
                self._build(lang)

    def _build(self, lang: str) -> dict[str, Any]:
        with self._build_lock:  # one build at a time: concurrent requests share it
            with self._cond:
                generation = self._generation
                cached = self._overview.get(lang)
                if cached is not None and cached[0] == generation:
                    return cached[1]
                entries = []
                for name in self._names or []:
                    meta, report = self._meta.get(name), self._reports.get(name)
                    if meta is None:  # listed, still being read
                        entries.append(RunEntry(name, None, {}, None, None))
                        continue
                    entries.append(RunEntry(name, report and report["report"], meta["tags"]["signals"],
                                            meta["last_update"], meta["source"],
                                            report is not None and report["version"] != meta["version"]))
                config = self._config
            response = self._rows.overview(self.logdir, lang, entries, config)
            with self._cond:
                self._overview[lang] = (generation, response)
            return response

    def worker_status(self) -> dict[str, Any] | None:
        """None while the first worker runs; else whether it is being restarted, how many times
        it was, and how the last one ended (the tab says so above the runs it still shows)."""
        if not self.restarts and not self._restarting:
            return None
        return {"state": "restarting" if self._restarting else "running", "restarts": self.restarts,
                "exit_code": self._last_exit}

    def reading_status(self) -> dict[str, int] | None:
        """During the worker's first read of the logdir: how many of the runs it found it has
        read (their rows are listed pending meanwhile); None after it."""
        with self._cond:
            if self._read_at or self._names is None:
                return None
            read = sum(name in self._meta for name in self._names)
            if self._reading is not None:
                read = max(read, self._reading["runs_read"])
            return {"runs_read": read, "runs_found": len(self._names)}

    def storage_status(self) -> dict[str, Any] | None:
        with self._cond:
            storage = self._storage
        if storage is None:
            return None
        return {"message": storage["message"], "failures": storage["failures"],
                "retry_in_s": round(max(0.0, storage["retry_at"] - time.time()), 1)}

    def tags(self, run: str) -> dict[str, Any]:
        """The run's tags and roles; a run listed but still being read is waited for."""
        self._listed()
        with self._cond:
            self._cond.wait_for(lambda: run in self._meta or run not in (self._names or []) or self._restarting,
                                FIRST_REFRESH_WAIT_S)
            meta = self._meta.get(run)
        if meta is None:
            raise UnknownRun(run)
        return meta["tags"]

    def report(self, run: str, lang: str = "en") -> dict[str, Any]:
        """The run's last complete report in `lang`; asked of the worker if it has none yet."""
        if run not in self._listed():
            raise UnknownRun(run)
        with self._cond:
            cached = self._reports.get(run)
        raw = cached["report"] if cached is not None else self._call("report", run)
        return render_run_report(raw, lang)

    def report_response(self, run: str, lang: str = "en") -> dict[str, Any]:
        return engine.logdir_report(self.logdir, [self.report(run, lang)], lang)

    # ----- queries the worker answers (they need the points)

    def series(self, run: str, tag: str, width: int, start: int | None, end: int | None) -> dict[str, Any]:
        return self._call("series", run, tag, width, start, end)

    def heatmap(self, run: str, width: int, start: int | None, end: int | None) -> str:
        return self._call("heatmap", run, width, start, end)

    def health_report(self, runs: list[str], lang: str, output_format: str) -> str:
        return self._call("health_report", runs, lang, output_format)
