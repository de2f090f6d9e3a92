"""The worker process's data layer and call handling (see `worker_process` for the protocol)."""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from tensorboard import errors

from tb_health_plugin.answers import tags_payload
from tb_health_plugin.roles import resolve_roles
from tb_health_plugin.service import HealthService, UnknownRun, source_format, unit_of

logger = logging.getLogger(__name__)

CALL_THREADS = 2  # calls answered at once: a slow export does not hold up a chart's series
READING_EVERY_S = 0.5  # the first read's progress is sent this often (the tab polls every few seconds)
REPORTS_EVERY_S = 0.5  # new reports are sent together at most this often: each sending makes
# the plugin rebuild the overview, and a full re-analysis of 1000 runs finishes hundreds of units a second


class PublishingService(HealthService):
    """`HealthService` that sends each listing and each new report to the plugin as it has it."""

    def __init__(self, logdir: str, refresh_interval_s: float, send) -> None:
        super().__init__(logdir, refresh_interval_s)
        self._send = send
        self._published_meta: dict[str, tuple] = {}  # run -> (version, overrides) last sent
        self._published_reports: dict[str, Any] = {}  # run -> key of the report last sent
        self._publish_lock = threading.Lock()
        self._unsent: dict[str, dict[str, Any]] = {}  # reports waiting for the next sending
        self._sent_at = 0.0
        threading.Thread(target=self._send_late_reports, name="tb-health-reports", daemon=True).start()

    def _send_late_reports(self) -> None:
        """Reports held back while others followed are sent when no more follow (a long analysis)."""
        while not self._stop.wait(REPORTS_EVERY_S):
            with self._publish_lock:
                if self._unsent and time.monotonic() - self._sent_at >= REPORTS_EVERY_S:
                    self._flush_reports()

    def refresh_now(self) -> None:
        if self.refresh_count:
            super().refresh_now()
        else:  # the first read of a big logdir takes minutes: say how far it got meanwhile
            reading_done = threading.Event()
            reporter = threading.Thread(target=self._send_reading, args=(reading_done,),
                                        name="tb-health-reading", daemon=True)
            reporter.start()
            try:
                super().refresh_now()
            finally:
                reading_done.set()
                reporter.join()
        self._publish_listing()

    def _send_reading(self, reading_done: threading.Event) -> None:
        sent = None
        while not reading_done.wait(READING_EVERY_S):
            reading = self._reader.reading
            if reading is not None and reading != sent:
                self._send(("reading", {"runs_read": reading[0], "runs_found": reading[1]}))
                sent = reading

    def _publish_listing(self) -> None:
        overrides = self._overrides_key()
        names = self._reader.run_names()
        changed: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                version, data = self._reader.version(name), self._reader.run(name)
            except KeyError:
                continue  # gone since it was listed
            if self._published_meta.get(name) == (version, overrides):
                continue
            roles = resolve_roles(data.scalars.keys(), data.histograms.keys(), dict(overrides))
            changed[name] = {"version": version, "tags": tags_payload(name, data, roles),
                             "last_update": data.last_wall_time or None, "source": source_format(self.logdir, name)}
            self._published_meta[name] = (version, overrides)
        for gone in set(self._published_meta) - set(names):
            del self._published_meta[gone]
        problem = self._reader.problem
        storage = None if problem is None else {
            "message": problem, "failures": self._backoff.failures,
            "retry_at": time.time() + self._backoff.wait_s(self.refresh_interval_s)}
        self._send(("listing", {"names": names, "changed": changed, "config": self.config_summary(),
                                "storage": storage}))

    def _unit_reports(self, members: list[str]) -> dict[str, dict[str, Any]]:
        reports = super()._unit_reports(members)
        with self._publish_lock:
            with self._lock:
                keys = {name: self._reports[name][0] for name in members if name in self._reports}
            fresh = {}
            for name in members:
                key = keys.get(name)
                if key is not None and self._published_reports.get(name) != key:
                    fresh[name] = {"version": dict(key[0])[name], "report": reports[name]}
                    self._published_reports[name] = key
            self._unsent.update(fresh)
            if time.monotonic() - self._sent_at >= REPORTS_EVERY_S:
                self._flush_reports()
        return reports

    def _flush_reports(self) -> None:
        """Send the reports not sent yet (call with `_publish_lock` held)."""
        if self._unsent:
            self._send(("reports", self._unsent))
            self._unsent = {}
        self._sent_at = time.monotonic()

    def _analyse_changed(self) -> None:
        for members in self._units(self._reader.run_names()).values():
            if self._stop.is_set():
                return
            try:
                self._unit_reports(members)
            except UnknownRun:
                continue  # deleted since the listing: the next listing drops it
        with self._publish_lock:
            self._flush_reports()

    def raw_report(self, run: str) -> dict[str, Any]:
        """One run's report as analysed (the plugin renders it in the language asked for)."""
        names = self.run_names()
        if run not in names:
            raise UnknownRun(run)
        members = [name for name in names if unit_of(name) == unit_of(run)]
        report = self._unit_reports(members)[run]
        with self._publish_lock:
            self._flush_reports()
        return report


def _error_reply(error: Exception) -> tuple[str, str]:
    if isinstance(error, errors.NotFoundError):
        return "not_found", str(error)
    if isinstance(error, errors.InvalidArgumentError):
        return "invalid_argument", str(error)
    return "error", f"{type(error).__name__}: {error}"


class WorkerHost:
    """The worker's loop: answers calls on a few threads; the refresher runs on its own."""

    def __init__(self, conn: Connection, logdir: str, refresh_interval_s: float) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self.service = PublishingService(logdir, refresh_interval_s, self.send)
        self._calls = ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="tb-health-call")

    def send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except OSError:  # the plugin is gone: nothing left to serve
                os._exit(0)

    def serve(self) -> None:
        self.service.start()
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # TensorBoard exited (or dropped us): stop now, mid-analysis or not
            if message[0] == "stop":
                os._exit(0)
            if message[0] == "call":
                self._calls.submit(self._answer, *message[1:])

    def _answer(self, call_id: int, method: str, args: tuple) -> None:
        try:
            result = getattr(self, f"call_{method}")(*args)
        except Exception as error:  # noqa: BLE001 - every failure is the caller's answer
            if not isinstance(error, errors.PublicError):
                logger.exception("tb-health worker: %s%r failed", method, args)
            self.send(("reply", call_id, False, _error_reply(error)))
        else:
            self.send(("reply", call_id, True, result))

    def call_series(self, run: str, tag: str, width: int, start: int | None, end: int | None) -> dict[str, Any]:
        return self.service.series(run, tag, width, start, end)

    def call_heatmap(self, run: str, width: int, start: int | None, end: int | None) -> str:
        return self.service.heatmap(run, width, start, end)

    def call_report(self, run: str) -> dict[str, Any]:
        return self.service.raw_report(run)

    def call_health_report(self, runs: list[str], lang: str, output_format: str) -> str:
        return self.service.health_report(runs, lang, output_format)
