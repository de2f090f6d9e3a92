"""Each run's own findings kept per data version, so re-analysing a job whose one rank grew
re-runs the per-run checks of that rank only (the cross-rank checks still see every rank).

`analysis.engine.analyze_runs(run_findings=...)` calls the function `for_versions` returns
instead of `findings_for_run`: a run whose key (its data version and the overrides) is the one
its findings were made for gets a copy of them, any other is analysed and kept. The per-run
checks are pure functions of the run's signals, so the findings are those a fresh analysis
gives; callers hold one memo per reader (data versions are unique within a reader).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals


class RunFindingsMemo:
    def __init__(self) -> None:
        self._kept: dict[str, tuple[Hashable, list[Event]]] = {}
        self._lock = threading.Lock()
        self.reused = 0  # runs whose findings were served from the memo

    def for_versions(self, keys: dict[str, Hashable]) -> Callable[[RunSignals], list[Event]]:
        """The per-run analysis for runs whose data key is `keys[run]`."""

        def run_findings(signals: RunSignals) -> list[Event]:
            key = keys[signals.run]
            with self._lock:
                kept = self._kept.get(signals.run)
            if kept is not None and kept[0] == key:
                with self._lock:
                    self.reused += 1
                return list(kept[1])  # the caller extends its list with cross-rank findings
            found = engine.findings_for_run(signals)
            with self._lock:
                self._kept[signals.run] = (key, list(found))
            return found

        return run_findings

    def forget(self, live: set[str]) -> None:
        """Drop the findings of runs no longer in the logdir."""
        with self._lock:
            for name in set(self._kept) - live:
                del self._kept[name]
