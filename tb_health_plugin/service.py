"""The plugin's data layer: one reader per logdir and an analysis cache.

Routes never read files or run detectors themselves. A refresh reads only appended bytes and is
rate-limited, and a run's report is recomputed only when the data of its analysis unit (the run,
or every rank of its job, since cross-rank checks compare them) changed.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from tb_health_plugin.analysis import engine
from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.series import RunData

MIN_REFRESH_INTERVAL_S = 2.0  # TensorBoard's own reload is 5 s; polling faster than this reads nothing new


class UnknownRun(KeyError):
    pass


class HealthService:
    def __init__(self, logdir: str, min_refresh_interval_s: float = MIN_REFRESH_INTERVAL_S):
        self.logdir = logdir
        self._reader = LogdirReader(logdir)
        self._min_interval = min_refresh_interval_s
        self._refresh_lock = threading.Lock()
        self._analysis_lock = threading.Lock()
        self._last_refresh = float("-inf")
        self._reports: dict[str, tuple[Any, dict[str, Any]]] = {}  # run -> (unit key, report)

    def refresh(self, force: bool = False) -> None:
        """Read what was appended since the last refresh, at most every `min_refresh_interval_s`."""
        with self._refresh_lock:
            now = time.monotonic()
            if force or now - self._last_refresh >= self._min_interval:
                self._reader.refresh()
                self._last_refresh = time.monotonic()

    def run_names(self) -> list[str]:
        self.refresh()
        return self._reader.run_names()

    def run_data(self, run: str) -> RunData:
        self.refresh()
        try:
            return self._reader.run(run)
        except KeyError:
            raise UnknownRun(run) from None

    def _units(self, names: list[str]) -> dict[str, list[str]]:
        units: dict[str, list[str]] = defaultdict(list)
        for name in names:
            job = engine.job_name(name)
            units[f"job:{job}" if job is not None else f"run:{name}"].append(name)
        return units

    def reports(self) -> dict[str, dict[str, Any]]:
        """Every run's report, analysing only units whose data changed."""
        names = self.run_names()
        out: dict[str, dict[str, Any]] = {}
        for members in self._units(names).values():
            out.update(self._unit_reports(members))
        return out

    def report(self, run: str) -> dict[str, Any]:
        names = self.run_names()
        if run not in names:
            raise UnknownRun(run)
        job = engine.job_name(run)
        members = [n for n in names if engine.job_name(n) == job] if job is not None else [run]
        return self._unit_reports(members)[run]

    def _unit_reports(self, members: list[str]) -> dict[str, dict[str, Any]]:
        try:
            key = tuple((name, self._reader.version(name)) for name in members)
        except KeyError:  # a run vanished between listing and analysis
            self.refresh(force=True)
            members = [m for m in members if m in self._reader.run_names()]
            key = tuple((name, self._reader.version(name)) for name in members)
        with self._analysis_lock:
            cached = [self._reports.get(name) for name in members]
            if all(c is not None and c[0] == key for c in cached):
                return {name: c[1] for name, c in zip(members, cached, strict=False)}
            runs = [self._reader.run(name) for name in members]
            fresh = engine.analyze_runs(runs)
            for name, report in zip(members, fresh, strict=False):
                self._reports[name] = (key, report)
            for stale in set(self._reports) - set(self._reader.run_names()):
                del self._reports[stale]
            return dict(zip(members, fresh, strict=False))
