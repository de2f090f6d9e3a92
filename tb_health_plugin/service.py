"""The plugin's data layer: one reader per logdir, a background refresher and an analysis cache.

Routes never read files themselves and never wait for a refresh after the first one: a
background thread (started by the first request) reads what was appended every
`refresh_interval_s` and re-analyses only the analysis units whose data changed (a unit is a run,
or every rank of a job, since cross-rank checks compare the ranks). A unit is analysed under its
own lock, so a slow analysis delays only the requests that need that unit's report.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from tb_health_plugin.analysis import engine
from tb_health_plugin.contract import job_of
from tb_health_plugin.i18n import render_run_report
from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.series import RunData

logger = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 2.0  # how stale the tab may be; TensorBoard's own reload is 5 s
FIRST_REFRESH_WAIT_S = 60.0  # the first request waits this long for the initial read
RUNS_ANALYSIS_BUDGET_S = 5.0  # `runs` waits this long in all for pending analyses, then says "pending"


VIEW_CACHE_BYTES = 32 << 20  # rendered views kept: several 5 MB heatmaps (100k parameters) and their zooms
VIEW_CACHE_ENTRIES = 64  # and at most this many, whatever their size


class UnknownRun(KeyError):
    pass


class ViewCache:
    """Rendered responses by (run, view, parameters), valid for one data version of the run.

    Least recently used entries go first once `max_bytes` or `max_entries` is passed; a response
    larger than `max_bytes` is not kept. A newer version of a run replaces the entry."""

    def __init__(self, max_bytes: int | None = None, max_entries: int | None = None) -> None:
        self.max_bytes = VIEW_CACHE_BYTES if max_bytes is None else max_bytes
        self.max_entries = VIEW_CACHE_ENTRIES if max_entries is None else max_entries
        self._entries: OrderedDict[tuple, tuple[int, str]] = OrderedDict()
        self.bytes = 0

    def get(self, key: tuple, version: int) -> str | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != version:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: tuple, version: int, body: str) -> None:
        self._drop(key)
        if len(body) > self.max_bytes:
            return
        self._entries[key] = (version, body)
        self.bytes += len(body)
        while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))

    def forget_runs(self, live: set[str]) -> None:
        for key in [key for key in self._entries if key[0] not in live]:
            self._drop(key)

    def _drop(self, key: tuple) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= len(entry[1])

    def __len__(self) -> int:
        return len(self._entries)


def unit_of(run: str) -> str:
    job = job_of(run)
    return f"job:{job}" if job is not None else f"run:{run}"


class HealthService:
    def __init__(self, logdir: str, refresh_interval_s: float = REFRESH_INTERVAL_S):
        self.logdir = logdir
        self.refresh_interval_s = refresh_interval_s
        self._reader = LogdirReader(logdir)
        self._lock = threading.Lock()  # guards the dicts below; held only briefly
        self._reports: dict[str, tuple[Any, dict[str, Any]]] = {}  # run -> (unit key, report)
        self._unit_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._views = ViewCache()
        self.views_rendered = 0  # responses rendered, not served from the cache
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_refresh = threading.Event()
        self.refresh_count = 0
        self.analysis_count = 0  # units analysed since start: unchanged logs add nothing

    # ----- background work

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="tb-health-refresh", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                try:
                    self.refresh_now()
                finally:
                    self._first_refresh.set()
                self._analyse_changed()
            except Exception:  # noqa: BLE001 - the refresher must outlive any bad log
                logger.exception("tb-health: refresh of %s failed", self.logdir)
            self._stop.wait(self.refresh_interval_s)

    def refresh_now(self) -> None:
        self._reader.refresh()
        self.refresh_count += 1

    def _ready(self) -> None:
        self.start()
        self._first_refresh.wait(FIRST_REFRESH_WAIT_S)

    def _analyse_changed(self) -> None:
        for members in self._units(self._reader.run_names()).values():
            if self._stop.is_set():
                return
            self._unit_reports(members)

    # ----- queries

    def run_names(self) -> list[str]:
        self._ready()
        return self._reader.run_names()

    def run_data(self, run: str) -> RunData:
        self._ready()
        try:
            return self._reader.run(run)
        except KeyError:
            raise UnknownRun(run) from None

    def view(self, run: str, view: str, params: tuple, render: Callable[[RunData], str]) -> str:
        """`render(run data)` (a response body), cached for the run's data version (`ViewCache`)."""
        self._ready()
        try:
            version = self._reader.version(run)
        except KeyError:
            raise UnknownRun(run) from None
        key = (run, view, params)
        with self._lock:
            cached = self._views.get(key, version)
        if cached is not None:
            return cached
        body = render(self.run_data(run))
        with self._lock:
            self.views_rendered += 1
            self._views.put(key, version, body)
            self._views.forget_runs(set(self._reader.run_names()))
        return body

    def reports(self, budget_s: float = RUNS_ANALYSIS_BUDGET_S, lang: str = "en") -> dict[str, dict[str, Any] | None]:
        """Every run's report, written in `lang`; None for runs whose first analysis did not finish
        within the budget.

        Runs whose data changed since their last analysis keep their last report until the new
        one is ready, so a busy analysis never blanks the overview.
        """
        names = self.run_names()
        deadline = time.monotonic() + budget_s
        out: dict[str, dict[str, Any] | None] = {}
        for unit, members in self._units(names).items():
            lock = self._unit_lock(unit)
            with self._lock:
                analysed_before = all(name in self._reports for name in members)
            # Only a unit never analysed is analysed here, and only within the budget: the others
            # keep their last report until the background refresher has a new one.
            remaining = deadline - time.monotonic()
            if not analysed_before and remaining > 0 and lock.acquire(timeout=remaining):
                lock.release()
                try:
                    out.update(self._unit_reports(members))
                    continue
                except UnknownRun:
                    pass
            with self._lock:
                for name in members:
                    cached = self._reports.get(name)
                    out[name] = cached[1] if cached else None
        return {name: render_run_report(report, lang) if report else None for name, report in out.items()}

    def report(self, run: str, lang: str = "en") -> dict[str, Any]:
        """One run's report, written in `lang` (the analysis is cached once for every language)."""
        names = self.run_names()
        if run not in names:
            raise UnknownRun(run)
        unit = unit_of(run)
        return render_run_report(self._unit_reports([n for n in names if unit_of(n) == unit])[run], lang)

    # ----- analysis cache

    def _units(self, names: list[str]) -> dict[str, list[str]]:
        units: dict[str, list[str]] = defaultdict(list)
        for name in names:
            units[unit_of(name)].append(name)
        return units

    def _unit_lock(self, unit: str) -> threading.Lock:
        with self._lock:
            return self._unit_locks[unit]

    def _unit_reports(self, members: list[str]) -> dict[str, dict[str, Any]]:
        with self._unit_lock(unit_of(members[0])):
            try:
                key = tuple((name, self._reader.version(name)) for name in members)
            except KeyError as gone:  # a run vanished since it was listed
                raise UnknownRun(gone.args[0]) from None
            with self._lock:
                cached = [self._reports.get(name) for name in members]
            if all(c is not None and c[0] == key for c in cached):
                return {name: c[1] for name, c in zip(members, cached, strict=True)}
            runs = [self._reader.run(name) for name in members]
            fresh = engine.analyze_runs(runs, lang=None)
            with self._lock:
                self.analysis_count += 1
                for name, report in zip(members, fresh, strict=True):
                    self._reports[name] = (key, report)
                live = set(self._reader.run_names())
                for stale in set(self._reports) - live:
                    del self._reports[stale]
            return dict(zip(members, fresh, strict=True))
