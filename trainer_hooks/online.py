"""Online health: the project's detectors run on what the hooks logged, while training runs.

The hooks record every scalar they write in memory; every few collections a single background
thread runs `tb_health_plugin.analysis.engine.analyze_run` on a snapshot, so the training thread
only pays for an append into preallocated arrays.

Memory is bounded: each tag keeps at most `MAX_POINTS_PER_TAG` points (24 bytes each: step,
value, wall time), 192 KiB a tag whatever the run's length. When a tag's store is full, its
newest half is kept point by point and every other point of the older half is dropped (the
first point always stays): the recent window the detectors compare against stays complete,
older history thins out geometrically into an envelope of the run. The analysis runs every few
collections, so a finding in the older part was reported when it was recent. The analysis grows with the run; to keep
it from competing with training for the interpreter, the thread is kept busy at most
`MAX_BUSY_FRACTION` of the wall time (a slow analysis delays the next one). Findings not seen before are handed to
`on_new_findings` (the logger writes them as `health/findings` text and prints them).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from tb_health_plugin.contract import SEVERITY_RANK
from tb_health_plugin.resume import surviving_points

logger = logging.getLogger(__name__)

Analyze = Callable[[Any], dict]  # RunData -> the contract's run report
FINAL_ANALYSIS_TIMEOUT_S = 60.0
# Share of the wall time the background analysis may use. It runs Python under the interpreter
# lock the training loop needs between steps, and a thread busy all the time made the tiny
# benchmark model's steps 2.3x longer (README, "Overhead"), so its share is what it may take from
# a small model's step time. One analysis takes 0.01-0.13 s from 1,000 to 100,000 steps
# (`bench/bench_online_analysis.py`): at the default interval (100 steps) and 40 ms steps that
# was 3% of the wall time at 100,000 steps under the earlier 10%. 1% keeps it a small share of
# the hooks' 3% budget; an analysis then starts no sooner than 100x the last one's time after
# it (12.5 s apart at 100,000 steps), where the default interval alone would allow 4 s.
MAX_BUSY_FRACTION = 0.01
# Points kept per tag: with the default collect_freq of 10 the newest half, 4096 collections,
# covers the last 40,960 steps at full resolution, far more than any detector's window.
MAX_POINTS_PER_TAG = 8192
INITIAL_POINTS = 256  # a tag's first allocation; doubles up to MAX_POINTS_PER_TAG


class BoundedSeries:
    """One tag's (step, value, wall time) points, at most `capacity` of them (see module doc)."""

    def __init__(self, capacity: int = MAX_POINTS_PER_TAG) -> None:
        self.capacity = capacity
        self.size = 0
        self.steps = np.empty(min(INITIAL_POINTS, capacity), dtype=np.int64)
        self.values = np.empty(self.steps.size, dtype=np.float64)
        self.wall_times = np.empty(self.steps.size, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        return self.steps.nbytes + self.values.nbytes + self.wall_times.nbytes

    def append(self, step: int, value: float, wall_time: float) -> None:
        if self.size == self.steps.size:
            if self.size < self.capacity:
                self._resize(min(2 * self.size, self.capacity))
            else:
                self._thin_older_half()
        self.steps[self.size], self.values[self.size], self.wall_times[self.size] = step, value, wall_time
        self.size += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of the kept points, oldest first."""
        n = self.size
        return self.steps[:n].copy(), self.values[:n].copy(), self.wall_times[:n].copy()

    def _resize(self, size: int) -> None:
        for name in ("steps", "values", "wall_times"):
            old = getattr(self, name)
            new = np.empty(size, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def _thin_older_half(self) -> None:
        half = self.size // 2
        keep = np.concatenate((np.arange(0, half, 2), np.arange(half, self.size)))
        for array in (self.steps, self.values, self.wall_times):
            array[: keep.size] = array[keep]
        self.size = keep.size


def default_analyze(lang: str = "en") -> Analyze:
    """The project's engine, its findings written in `lang`."""
    from tb_health_plugin.analysis.engine import analyze_run

    return functools.partial(analyze_run, lang=lang)


class OnlineAnalyzer:
    """Keeps what was logged and analyses it in the background every `every` collections."""

    def __init__(
        self,
        run_name: str,
        on_new_findings: Callable[[list[dict]], None],
        every: int = 10,
        min_severity: str = "warning",
        analyze: Analyze | None = None,
        clock: Callable[[], float] = time.monotonic,
        lang: str = "en",
        on_analysed: Callable[[int, str], None] | None = None,
    ) -> None:
        self.run_name = run_name
        self._clock = clock  # seconds, for spacing the analyses; tests drive a clock of their own
        self.every = every
        self.min_rank = SEVERITY_RANK[min_severity]
        self._on_new_findings = on_new_findings
        self._on_analysed = on_analysed  # (last step analysed, the run's status) after each analysis
        self._analyze = analyze
        self.lang = lang
        self._scalars: dict[str, BoundedSeries] = defaultdict(BoundedSeries)
        self._lock = threading.Lock()  # guards the recorded scalars
        self._analysis_lock = threading.Lock()  # one analysis at a time (background or final)
        self._seen: set[tuple[str, str, int]] = set()
        self._collections = 0
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._disabled = False
        self._next_start = 0.0  # clock time before which no new analysis starts

    def record_scalar(self, tag: str, step: int, value: float, wall_time: float) -> None:
        with self._lock:
            self._scalars[tag].append(int(step), float(value), float(wall_time))

    def retained(self) -> tuple[int, int]:
        """(points kept, bytes allocated for them) over all tags."""
        with self._lock:
            series = list(self._scalars.values())
        return sum(s.size for s in series), sum(s.nbytes for s in series)

    def collection_done(self) -> None:
        """Called once per collection; starts a background analysis every `every` of them."""
        self._collections += 1
        if self._disabled or self._collections % self.every:
            return
        if self._pending is not None and not self._pending.done():
            return  # the previous analysis is still running: skip rather than queue up
        if self._clock() < self._next_start:
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
        started = self._clock()
        try:
            if self._analyze is None:
                self._analyze = default_analyze(self.lang)
            data = self.run_data()
            report = self._analyze(data)
        except Exception as error:  # the analysis must never break training
            self._disabled = True
            logger.warning("tb-health: online analysis disabled after an error: %s: %s", type(error).__name__, error)
            return []
        finally:
            took = self._clock() - started
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
        steps = data.step_range()
        if self._on_analysed is not None and steps is not None:
            self._on_analysed(steps[1], str(report.get("status")))  # after the findings: they come first in the log
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
        """A `RunData` snapshot of everything recorded, resumes resolved as the readers do
        (`tb_health_plugin/resume.py`)."""
        from tb_health_plugin.run_data import RunData, ScalarSeries

        run = RunData(name=self.run_name)
        with self._lock:
            snapshot = {tag: series.arrays() for tag, series in self._scalars.items()}
        for tag, (steps, values, wall_times) in snapshot.items():
            keep = surviving_points(steps)  # the readers' resume rule: the later write wins
            run.scalars[tag] = ScalarSeries(steps[keep], wall_times[keep], values[keep])
            if wall_times.size:
                run.last_wall_time = max(run.last_wall_time, float(wall_times[-1]))
        return run
