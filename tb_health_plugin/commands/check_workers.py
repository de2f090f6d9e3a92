"""`tb-health check --jobs N`: read and analyse a local logdir's runs in N worker processes
(and `tb-health report --jobs N`: analyse them and draw the report's charts).

Each run is read and checked on its own; only the cross-rank checks, the diagnosis and the report
need every run, and they stay in the command's process. So the check spreads the runs over the
machine's cores, one run per task, in two phases (read every run, then analyse every run) so that
the progress lines say what they said before.

- Workers are forked: they start with the command's imports done (a spawned worker would spend
  0.2-0.5 s importing before its first run). The command is single-threaded when it forks.
- Workers ignore SIGINT: Ctrl-C interrupts the command, which cancels what is still queued and
  terminates the workers (nobody will read what they are analysing). While the pool works, the
  command's own SIGINT handler only sets a flag, and `KeyboardInterrupt` is raised from here
  between waits: raised inside the executor's code, it can leave a lock taken. CI once hung
  after printing "interrupted": Ctrl-C had come while `submit` held the executor's work-id
  queue lock, so its manager thread waited on it forever and the interpreter's exit waited on
  that thread (py-spy on the hung process).
- A run comes back to the command pickled (15 MB of columns for 640k points: 40 ms).
- The readers' warnings about damaged files are logged in the worker; they are sent back with
  the run and logged again here, so `read_problems` prints and counts them as before.
- A worker that dies (the kernel's OOM killer) breaks the pool: the phase is done again in the
  command's own process, and nothing is lost.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context

from tb_health_plugin.commands.messages import READERS_LOGGER

WAIT_SECONDS = 0.1  # how often the command looks for a Ctrl-C while the workers work
MAX_AUTO_JOBS = 8  # each worker holds one run's analysis: this bounds the memory on a big machine


def auto_jobs() -> int:
    """The cores this process may use, at most `MAX_AUTO_JOBS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_AUTO_JOBS))


class RunWorkers:
    """A pool of forked workers that read and analyse runs; use as a context manager."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None  # started by the first phase of two runs or more

    def __enter__(self) -> RunWorkers:
        return self

    def __exit__(self, *exc_info) -> None:
        if self._pool is None:
            return
        if exc_info[0] is not None:  # Ctrl-C or an error: what the workers do is no longer wanted
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.terminate()  # the pool's own table: a private attribute, left alone if it moves
        self._pool.shutdown(wait=exc_info[0] is None, cancel_futures=True)

    def read(self, found: dict) -> list:
        """Every run of `found` (`discover_runs`' map of names to files), read; in name order."""
        names = sorted(found)
        results = self._map(_read_run, [(name, found[name]) for name in names])
        if results is None:
            results = [_read_run(name, found[name]) for name in names]
        readers = logging.getLogger(READERS_LOGGER)
        runs = []
        for run, records in results:
            for record in records:
                readers.handle(record.to_record())
            runs.append(run)
        return runs

    def findings(self, runs: list, overrides: dict[str, str] | None,
                 on_progress: Callable[[int, int], None] | None = None) -> dict[str, list]:
        """Each run's own findings (`engine.findings_for_run`), by run name."""
        tasks = [(run, overrides) for run in runs]
        results = self._map(_own_findings, tasks, on_progress)
        if results is None:
            results = []
            for done, task in enumerate(tasks, start=1):
                results.append(_own_findings(*task))
                if on_progress is not None:
                    on_progress(done, len(tasks))
        return {run.name: events for run, events in zip(runs, results, strict=True)}

    def charts(self, tasks: list, on_progress: Callable[[int, int], None] | None = None) -> list[str]:
        """The SVG of each `report.charts.ChartTask`, in order (`tb-health report`)."""
        results = self._map(_draw_chart, [(task,) for task in tasks], on_progress)
        if results is None:
            from tb_health_plugin.report.charts import draw_here

            results = draw_here(tasks, on_progress)
        return results

    def _map(self, function, tasks: list[tuple], on_progress=None) -> list | None:
        """`function(*task)` for each task in the workers, in order; None when the tasks are
        better run here: fewer than two, or the pool broke."""
        if len(tasks) < 2:
            return None  # a single run gains nothing from a worker
        if self._pool is None:
            self._pool = ProcessPoolExecutor(min(self.jobs, len(tasks)), mp_context=get_context("fork"),
                                             initializer=_ignore_sigint)
        try:
            with _interrupt_between_waits() as interrupted:
                futures = [self._pool.submit(function, *task) for task in tasks]
                pending, done = set(futures), 0
                while pending and not interrupted:
                    finished, pending = wait(pending, timeout=WAIT_SECONDS, return_when=FIRST_COMPLETED)
                    for _ in finished:
                        done += 1
                        if on_progress is not None:
                            on_progress(done, len(futures))
                if interrupted:
                    raise KeyboardInterrupt
            return [future.result() for future in futures]
        except BrokenProcessPool:
            logging.getLogger(__name__).warning("tb-health: a worker process died; checking in this process instead")
            return None


@contextmanager
def _interrupt_between_waits():
    """A list that a SIGINT appends to instead of raising `KeyboardInterrupt` wherever the main
    thread is (see the module doc); off the main thread, where signals cannot be caught, an
    empty list and Python's own handling."""
    interrupted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda number, frame: interrupted.append(number))
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


class _Record:
    """A reader warning that can cross a process boundary (a LogRecord's traceback cannot)."""

    def __init__(self, record: logging.LogRecord) -> None:
        self.name, self.level, self.msg, self.args = record.name, record.levelno, record.msg, record.args
        error = record.exc_info[1] if record.exc_info else None
        try:
            pickle.dumps(error)
        except Exception:  # noqa: BLE001 - an exception type that cannot be rebuilt: keep its words
            error = RuntimeError(f"{type(error).__name__}: {error}")
        self.error = error

    def to_record(self) -> logging.LogRecord:
        exc_info = (type(self.error), self.error, None) if self.error is not None else None
        return logging.LogRecord(self.name, self.level, __file__, 0, self.msg, self.args, exc_info)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[_Record] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(_Record(record))


def _draw_chart(task) -> str:
    return task.draw()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _read_run(name: str, files: list) -> tuple:
    """One run read (in a worker, or here when the pool broke), with the readers' warnings."""
    from tb_health_plugin.readers.logdir_reader import read_run

    readers = logging.getLogger(READERS_LOGGER)
    collect = _Collect()
    saved = readers.handlers[:], readers.propagate
    readers.handlers[:] = [collect]  # the command's handler prints them once they are back
    readers.propagate = False
    try:
        run = read_run(name, files)
    finally:
        readers.handlers[:], readers.propagate = saved
    return run, collect.records


def _own_findings(run, overrides: dict[str, str] | None) -> list:
    from tb_health_plugin.analysis.engine import findings_for_run
    from tb_health_plugin.analysis.signals import RunSignals

    return findings_for_run(RunSignals.from_run(run, overrides))
