"""The plugin's data layer: one reader per logdir, a background refresher and an analysis cache.

Routes never read files themselves and never wait for a refresh after the first one: a
background thread (started by the first request) reads what was appended every
`refresh_interval_s` and re-analyses only the analysis units whose data changed (a unit is a run,
or every rank of a job, since cross-rank checks compare the ranks). A unit is analysed under its
own lock, so a slow analysis delays only the requests that need that unit's report.

What the routes answer is decided here, cached per data version: the role of each tag (with
the logdir's `tb-health.toml` overrides, the same the CLI reads), each run's summary and each
job's roll-up for the overview, the versioned report. Unknown runs raise TensorBoard's
`errors.NotFoundError`, which TensorBoard's application turns into a 404.

When the logdir is on object storage and the store fails (wrong credentials, a missing bucket,
throttling, a dropped connection), the runs read before stay served, `storage_status()` says
what failed and when the next attempt is, and refreshes back off (`storage.Backoff`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from tensorboard import errors

from tb_health_plugin.analysis import engine, triage
from tb_health_plugin.analysis.render import render_run_report
from tb_health_plugin.analysis.run_findings import RunFindingsMemo
from tb_health_plugin.answers import OverviewRows, RunEntry, heatmap_body, series_payload, tags_payload
from tb_health_plugin.contract import job_of
from tb_health_plugin.logdir_config import (
    LogdirConfig,
    LogdirConfigError,
    config_signature,
    load_logdir_config,
)
from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.readers.discovery import MINDSPORE, TFEVENTS, event_file_format
from tb_health_plugin.readers.logdir_reader import HeadsOnly
from tb_health_plugin.readers.storage import Backoff
from tb_health_plugin.roles import RoleMap, resolve_roles
from tb_health_plugin.run_data import RunData

logger = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 2.0  # how stale the tab may be; TensorBoard's own reload is 5 s
FIRST_REFRESH_WAIT_S = 60.0  # the first request waits this long for the initial read
RUNS_ANALYSIS_BUDGET_S = 5.0  # `runs` waits this long in all for pending analyses, then says "pending"


VIEW_CACHE_BYTES = 32 << 20  # rendered views kept: several 5 MB heatmaps (100k parameters) and their zooms
VIEW_CACHE_ENTRIES = 64  # and at most this many, whatever their size


class UnknownRun(errors.NotFoundError):
    """A run the logdir does not have (any more); TensorBoard answers 404."""

    def __init__(self, run: str) -> None:
        super().__init__(f"unknown run: {run}")
        self.run = run


def source_format(logdir: str, run: str) -> str | None:
    """`mindspore` when the run's folder holds MindSpore summary files (TensorBoard's own Scalars tab
    cannot read them, so the tab suggests `tb-health convert`), `tfevents` when it holds only
    TensorBoard event files, None when the folder cannot be listed (e.g. a remote logdir)."""
    folder = logdir if run == "." else os.path.join(logdir, *run.split("/"))
    try:
        kinds = {event_file_format(name) for name in os.listdir(folder)}
    except OSError:
        return None
    return MINDSPORE if MINDSPORE in kinds else TFEVENTS if TFEVENTS in kinds else None


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


def heads_only_policy(mode: str, overrides: Callable[[], dict[str, str]]) -> HeadsOnly:
    """The reader's heads-only policy under triage `mode` (`triage.reads_heads_only`,
    `triage.points_kept`); `overrides()`: the logdir's role overrides now."""
    return HeadsOnly(
        runs=lambda name, runs_found: triage.reads_heads_only(mode, name, runs_found),
        keeps_points=lambda tag: tag in triage.points_kept(overrides()),
    )


class HealthService:
    def __init__(self, logdir: str, refresh_interval_s: float = REFRESH_INTERVAL_S):
        self.logdir = logdir
        self.refresh_interval_s = refresh_interval_s
        self.triage_mode = triage.mode_from_environment()  # ranks trusted from their online verdict
        # ranks that may be trusted are first read heads-only (`analysis/triage.py`, "Reading less")
        self._reader = LogdirReader(logdir, heads_only=heads_only_policy(self.triage_mode, lambda: self._config.tags))
        self._lock = threading.Lock()  # guards the dicts below; held only briefly
        self._reports: dict[str, tuple[Any, dict[str, Any]]] = {}  # run -> (unit key, report)
        self._unit_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._run_findings = RunFindingsMemo()  # a job re-analysed re-runs the per-run checks of grown ranks only
        self._views = ViewCache()
        self.views_rendered = 0  # responses rendered, not served from the cache
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_refresh = threading.Event()
        self.refresh_count = 0
        self.analysis_count = 0  # units analysed since start: unchanged logs add nothing
        self._config = LogdirConfig()  # the logdir's tb-health.toml, re-read when it changes
        self._config_signature: tuple | None = None
        self.config_error: str | None = None
        self._roles: dict[str, tuple[tuple, RoleMap]] = {}  # run -> ((version, overrides), roles)
        # lang -> (versions and config; response; the reports it rests on; generation it is current at)
        self._overview: dict[str, tuple] = {}
        self._rows = OverviewRows()
        self._backoff = Backoff()
        self._next_refresh_at = 0.0  # time.time() of the next refresh
        self.data_generation = 0  # bumped when a refresh changed any run or the config was re-read

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
            wait_s = self._backoff.wait_s(self.refresh_interval_s)
            self._next_refresh_at = time.time() + wait_s
            self._stop.wait(wait_s)

    def refresh_now(self) -> None:
        self._reload_config()
        if self._reader.refresh() or self._reader.problem is not None:
            self.data_generation += 1
        self.refresh_count += 1
        if self._reader.problem is None:
            self._backoff.succeeded()
        else:
            self._backoff.failed()

    def storage_status(self) -> dict[str, Any] | None:
        """None while the logdir reads fine; else what failed, how many refreshes in a row, and
        the seconds until the next attempt (the data read before is still served)."""
        problem = self._reader.problem
        if problem is None:
            return None
        return {
            "message": problem,
            "failures": self._backoff.failures,
            "retry_in_s": round(max(0.0, self._next_refresh_at - time.time()), 1),
        }

    def reading_status(self) -> dict[str, int] | None:
        """During the first read of the logdir (minutes for 10,000 runs, and no run is listed
        before it ends): how many of the runs found were read so far; None after it."""
        reading = self._reader.reading
        if reading is None or self._first_refresh.is_set():
            return None
        return {"runs_read": reading[0], "runs_found": reading[1]}

    def _reload_config(self) -> None:
        signature = config_signature(self.logdir)
        if self.refresh_count and signature == self._config_signature:
            return
        try:
            config, error = load_logdir_config(self.logdir), None
        except LogdirConfigError as problem:  # analysed without overrides; `runs` says why
            config, error = LogdirConfig(), str(problem)
            logger.warning("tb-health: %s", problem)
        with self._lock:
            self._config, self._config_signature, self.config_error = config, signature, error
            self.data_generation += 1

    def tag_overrides(self) -> dict[str, str]:
        """Role -> tag from the logdir's `tb-health.toml` (what `tb-health check --tag` also takes)."""
        with self._lock:
            return dict(self._config.tags)

    def _overrides_key(self) -> tuple:
        return tuple(sorted(self.tag_overrides().items()))

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
        """The run with every point (a run read heads-only is read again in full first)."""
        self._ready()
        try:
            if self._reader.is_heads_only(run):
                self._reader.read_in_full([run])
            return self._reader.run(run)
        except KeyError:
            raise UnknownRun(run) from None

    def _run_heads(self, run: str) -> RunData:
        """The run as read, maybe heads-only: for its tags, step range and wall time, not its points."""
        self._ready()
        try:
            return self._reader.run(run)
        except KeyError:
            raise UnknownRun(run) from None

    def _version(self, run: str) -> int:
        try:
            return self._reader.version(run)
        except KeyError:
            raise UnknownRun(run) from None

    def roles(self, run: str) -> RoleMap:
        """Which tag plays which role in `run`, with the logdir's overrides; cached per data version."""
        self._ready()
        key = (self._version(run), self._overrides_key())
        with self._lock:
            cached = self._roles.get(run)
        if cached is not None and cached[0] == key:
            return cached[1]
        data = self._run_heads(run)
        roles = resolve_roles(data.scalars.keys(), data.histograms.keys(), dict(key[1]))
        with self._lock:  # the runs deleted since are forgotten by the overview's next rebuild
            self._roles[run] = (key, roles)
        return roles

    def overview(self, budget_s: float = RUNS_ANALYSIS_BUDGET_S, lang: str = "en") -> dict[str, Any]:
        """The overview: every run's summary and every job's roll-up (`views/overview.py`), plus
        the overrides in force. Rebuilt only when a run's data version, its report (a pending
        or stale one replaced) or the overrides changed; while no refresh changed anything and
        no unit was analysed, and no run is pending, not even walked (10,000 runs take 50 ms)."""
        generation = (self.data_generation, self.analysis_count)  # read first: a change during the walk shows next time
        with self._lock:
            cached = self._overview.get(lang)
        if cached is not None and cached[3] == generation and self._first_refresh.is_set():
            return cached[1]
        reports = self._raw_reports(budget_s)  # unrendered: the same objects while nothing changed
        versions = []
        for name in sorted(reports):
            try:  # a report is identified by its object: the cached response keeps them alive
                versions.append((name, self._reader.version(name), id(reports[name])))
            except KeyError:
                continue  # deleted since it was listed
        config = self.config_summary()
        key = (tuple(versions), repr(config))
        # reused without a walk while nothing changes, unless runs were still pending
        reusable_at = generation if all(report is not None for report in reports.values()) else None
        with self._lock:
            cached = self._overview.get(lang)
            if cached is not None and cached[0] == key:
                self._overview[lang] = (*cached[:3], reusable_at)
                return cached[1]
        entries = []
        for name, _, _ in versions:
            try:
                data = self._run_heads(name)
                roles = self.roles(name)
            except UnknownRun:
                continue
            entries.append(RunEntry(name, reports[name], roles.scalars, data.last_wall_time or None,
                                    source_format(self.logdir, name), self._analysing(name)))
        with self._lock:  # once per rebuild, not per run: with 10,000 runs that was seconds per rebuild
            for gone in set(self._roles) - {name for name, _, _ in versions}:
                del self._roles[gone]
        response = self._rows.overview(self.logdir, lang, entries, config)
        with self._lock:
            self._overview[lang] = (key, response, reports, reusable_at)
        return response

    def _analysing(self, name: str) -> bool:
        """Whether the run's report is of older data than the run now has (re-analysis pending)."""
        with self._lock:
            cached = self._reports.get(name)
        try:
            return cached is not None and (name, self._reader.version(name)) not in cached[0][0]
        except KeyError:
            return False

    def config_summary(self) -> dict[str, Any]:
        """The logdir's `tb-health.toml` as the `runs` route states it: file, overrides, error."""
        with self._lock:
            return {"file": self._config.path and os.path.basename(self._config.path),
                    "tags": dict(self._config.tags), "error": self.config_error}

    def tags(self, run: str) -> dict[str, Any]:
        """The `tags` route's answer: the run's tags and the role each plays."""
        return tags_payload(run, self._run_heads(run), self.roles(run))

    def series(self, run: str, tag: str, width: int, start: int | None, end: int | None) -> dict[str, Any]:
        """The `series` route's answer: the envelope of one scalar tag (`views/envelope.py`)."""
        return series_payload(run, tag, self.run_data(run), width, start, end)

    def heatmap(self, run: str, width: int, start: int | None, end: int | None) -> str:
        """The `heatmap` route's body, rendered once per data version (100k parameters take seconds)."""
        return self.view(run, "heatmap", (width, start, end),
                         lambda data: heatmap_body(run, data, self.roles(run), width, start, end))

    def report_response(self, run: str, lang: str = "en") -> dict[str, Any]:
        """The versioned report holding just `run`, written in `lang` (`http_api.md`, `report`)."""
        return engine.logdir_report(self.logdir, [self.report(run, lang)], lang)

    def view(self, run: str, view: str, params: tuple, render: Callable[[RunData], str]) -> str:
        """`render(run data)` (a response body), cached for the run's data version (`ViewCache`)."""
        self._ready()
        version = self._version(run)
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
        within the budget."""
        return {name: render_run_report(r, lang) if r else None for name, r in self._raw_reports(budget_s).items()}

    def _raw_reports(self, budget_s: float) -> dict[str, dict[str, Any] | None]:
        """Every run's report as analysed (events, no text); None for runs whose first analysis
        did not finish within the budget.

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
        return out

    def health_report(self, runs: list[str], lang: str, output_format: str) -> str:
        """The self-contained health report (`tb-health report`) of `runs`; UnknownRun for a
        run the logdir does not have."""
        from tb_health_plugin.report.document import build_report
        from tb_health_plugin.report.render import render_html, render_markdown

        analysed = {"runs": [self.report(run, lang) for run in runs]}
        self._reader.read_in_full(runs)  # the report charts their points
        document = build_report(self.logdir, self._reader, analysed, lang, runs)
        return render_html(document) if output_format == "html" else render_markdown(document)

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
            overrides = self._overrides_key()
            try:
                key = (tuple((name, self._reader.version(name)) for name in members), overrides)
            except KeyError as gone:  # a run vanished since it was listed
                raise UnknownRun(gone.args[0]) from None
            with self._lock:
                cached = [self._reports.get(name) for name in members]
            if all(c is not None and c[0] == key for c in cached):
                return {name: c[1] for name, c in zip(members, cached, strict=True)}
            runs = [self._reader.run(name) for name in members]
            triaged = triage.enabled(self.triage_mode, len(self._reader.run_names()))
            wanted = triage.needing_points(runs, dict(overrides), triaged)
            if wanted and self._reader.read_in_full(wanted):  # their points are analysed
                runs = [self._reader.run(name) for name in members]
            keys = {name: (version, overrides) for name, version in key[0]}
            fresh = triage.analyze_unit(runs, dict(overrides), None, triaged,
                                        run_findings=self._run_findings.for_versions(keys))
            with self._lock:
                self.analysis_count += 1
                for name, report in zip(members, fresh, strict=True):
                    self._reports[name] = (key, report)
                live = set(self._reader.run_names())
                for stale in set(self._reports) - live:
                    del self._reports[stale]
            self._run_findings.forget(live)
            return dict(zip(members, fresh, strict=True))
