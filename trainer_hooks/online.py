"""Online health: the project's detectors run on what the hooks logged, while training runs.

The hooks record every scalar they write into an in-memory `RunData`; every few collections a
single background thread runs `tb_health_plugin.analysis.engine.analyze_run` on a snapshot, so
the training thread only pays for appending to lists. The analysis grows with the run; to keep
it from competing with training for the interpreter, the thread is kept busy at most
`MAX_BUSY_FRACTION` of the wall time (a slow analysis delays the next one). Findings not seen before are handed to
`on_new_findings` (the logger writes them as `health/findings` text and prints them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
Analyze = Callable[[Any], dict]  # RunData -> the contract's run report
FINAL_ANALYSIS_TIMEOUT_S = 60.0
MAX_BUSY_FRACTION = 0.1  # of wall time the background analysis may use


def default_analyze() -> Analyze:
    from tb_health_plugin.analysis.engine import analyze_run

    return analyze_run


class OnlineAnalyzer:
    """Keeps what was logged and analyses it in the background every `every` collections."""

    def __init__(
        self,
        run_name: str,
        on_new_findings: Callable[[list[dict]], None],
        every: int = 10,
        min_severity: str = "warning",
        analyze: Analyze | None = None,
    ) -> None:
        self.run_name = run_name
        self.every = every
        self.min_rank = SEVERITY_RANK[min_severity]
        self._on_new_findings = on_new_findings
        self._analyze = analyze
        self._scalars: dict[str, tuple[list[int], list[float], list[float]]] = defaultdict(lambda: ([], [], []))
        self._lock = threading.Lock()  # guards the recorded scalars
        self._analysis_lock = threading.Lock()  # one analysis at a time (background or final)
        self._seen: set[tuple[str, str, int]] = set()
        self._collections = 0
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._disabled = False
        self._next_start = 0.0  # time.monotonic() before which no new analysis starts

    def record_scalar(self, tag: str, step: int, value: float, wall_time: float) -> None:
        with self._lock:
            steps, values, wall_times = self._scalars[tag]
            steps.append(int(step))
            values.append(float(value))
            wall_times.append(wall_time)

    def collection_done(self) -> None:
        """Called once per collection; starts a background analysis every `every` of them."""
        self._collections += 1
        if self._disabled or self._collections % self.every:
            return
        if self._pending is not None and not self._pending.done():
            return  # the previous analysis is still running: skip rather than queue up
        if time.monotonic() < self._next_start:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tb-health-online")
        self._pending = self._executor.submit(self.analyze_now)

    def analyze_now(self) -> list[dict]:
        """Analyse what was recorded so far and report the findings not reported before."""
        with self._analysis_lock:
            return self._analyze_locked()

    def _analyze_locked(self) -> list[dict]:
        if self._disabled:
            return []
        started = time.monotonic()
        try:
            if self._analyze is None:
                self._analyze = default_analyze()
            report = self._analyze(self.run_data())
        except Exception as error:  # the analysis must never break training
            self._disabled = True
            logger.warning("tb-health: online analysis disabled after an error: %s: %s", type(error).__name__, error)
            return []
        finally:
            took = time.monotonic() - started
            self._next_start = started + took / MAX_BUSY_FRACTION
        new = []
        for finding in report.get("findings", []):
            key = (str(finding.get("kind")), str(finding.get("tag")), int(finding.get("step", 0)))
            if SEVERITY_RANK.get(finding.get("severity"), 0) < self.min_rank or key in self._seen:
                continue
            self._seen.add(key)
            new.append(finding)
        if new:
            self._on_new_findings(new)
        return new

    def finish(self) -> None:
        """Wait for a running analysis, then analyse the complete run once more."""
        if self._pending is not None:
            try:
                self._pending.result(timeout=FINAL_ANALYSIS_TIMEOUT_S)
            except Exception:
                pass
        if self._collections:
            self.analyze_now()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def run_data(self):
        """A `RunData` snapshot of everything recorded (later writes of a step win)."""
        from tb_health_plugin.series import RunData, ScalarSeries

        run = RunData(name=self.run_name)
        with self._lock:
            snapshot = {tag: (list(s), list(v), list(w)) for tag, (s, v, w) in self._scalars.items()}
        for tag, (steps, values, wall_times) in snapshot.items():
            steps_arr = np.asarray(steps, dtype=np.int64)
            # keep the last write of each step, steps ascending (a resume may repeat steps)
            reversed_unique, index = np.unique(steps_arr[::-1], return_index=True)
            keep = len(steps_arr) - 1 - index
            run.scalars[tag] = ScalarSeries(
                reversed_unique,
                np.asarray(wall_times, dtype=np.float64)[keep],
                np.asarray(values, dtype=np.float64)[keep],
            )
            if wall_times:
                run.last_wall_time = max(run.last_wall_time, float(wall_times[-1]))
        return run
