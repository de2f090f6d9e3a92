"""The plugin's data layer: no repeated work on unchanged logs, fresh results after appends,
and a slow analysis that delays nobody else."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tb_health_plugin import service as service_module
from tb_health_plugin.service import HealthService, UnknownRun
from tests.eventlogs import write_scalars

STEPS = np.arange(300)


def wait_until(condition, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.fixture()
def logdir(tmp_path):
    write_scalars(tmp_path / "a", {"train/loss": (STEPS, 2.0 / (1 + STEPS / 30.0))})
    write_scalars(tmp_path / "b", {"train/loss": (STEPS, 2.0 / (1 + STEPS / 30.0))})
    return tmp_path


def test_polling_unchanged_logs_does_no_new_analysis(logdir):
    service = HealthService(str(logdir), refresh_interval_s=0.05)
    try:
        first = service.reports()
        assert set(first) == {"a", "b"}
        analysed = service.analysis_count
        refreshes = service.refresh_count
        wait_until(lambda: service.refresh_count >= refreshes + 5)
        for _ in range(20):
            assert service.reports() == first
        assert service.analysis_count == analysed
    finally:
        service.stop()


def test_appended_run_and_new_points_show_up(logdir):
    service = HealthService(str(logdir), refresh_interval_s=0.05)
    try:
        assert service.report("a")["steps"] == {"first": 0, "last": 299}
        write_scalars(logdir / "c", {"loss": (STEPS, np.ones(300))})
        more = np.arange(300, 400)
        write_scalars(logdir / "a", {"train/loss": (more, np.full(100, 0.1))})
        wait_until(lambda: "c" in service.run_names())
        wait_until(lambda: service.report("a")["steps"]["last"] == 399)
        with pytest.raises(UnknownRun):
            service.report("nope")
    finally:
        service.stop()


def test_slow_analysis_of_one_run_does_not_block_another(logdir, monkeypatch):
    release, entered, a_done = threading.Event(), threading.Event(), threading.Event()
    original = service_module.engine.analyze_runs

    def analyze_runs(runs, overrides=None, **options):
        if runs[0].name == "a":
            entered.set()
            release.wait(120)
            a_done.set()
        return original(runs, overrides, **options)

    monkeypatch.setattr(service_module.engine, "analyze_runs", analyze_runs)
    service = HealthService(str(logdir), refresh_interval_s=3600)
    try:
        service.run_names()
        assert entered.wait(20)  # the background thread is now stuck analysing "a"
        assert service.report("b")["run"] == "b"
        assert len(service.run_data("a").scalars["train/loss"]) == 300
        partial = service.reports(budget_s=0.2)
        assert partial["a"] is None and partial["b"]["run"] == "b"
        assert not a_done.is_set()  # all of that was answered while "a" was still being analysed
    finally:
        release.set()
        service.stop()
