"""Progress of the first read of a logdir: no run is listed before it ends, so the service says how
many of the runs found were read so far."""

from __future__ import annotations

import threading

import numpy as np

from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.service import HealthService
from tests.eventlogs import write_scalars

RUNS = ("a", "b", "c")


def write_runs(root) -> None:
    steps = np.arange(50)
    for name in RUNS:
        write_scalars(root / name, {"train/loss": (steps, np.ones(50))})


def test_the_reader_says_how_many_runs_it_read_during_a_refresh(tmp_path, monkeypatch):
    write_runs(tmp_path)
    reader = LogdirReader(tmp_path)
    seen = []
    read_run = LogdirReader._read_run

    def recording(run, files):
        seen.append(reader.reading)
        return read_run(run, files)

    monkeypatch.setattr(LogdirReader, "_read_run", staticmethod(recording))
    assert reader.reading is None
    reader.refresh()
    assert seen == [(0, 3), (1, 3), (2, 3)]
    assert reader.reading is None


def test_the_service_reports_progress_during_its_first_read_only(tmp_path, monkeypatch):
    write_runs(tmp_path)
    service = HealthService(str(tmp_path), refresh_interval_s=60)
    reached, release = threading.Event(), threading.Event()
    statuses = []
    read_run = LogdirReader._read_run

    def paused(run, files):  # the refresher stops inside the first read until the test has looked
        if run.name == "b" and not release.is_set():
            statuses.append(service.reading_status())
            reached.set()
            release.wait(30)
        return read_run(run, files)

    monkeypatch.setattr(LogdirReader, "_read_run", staticmethod(paused))
    try:
        service.start()
        assert reached.wait(30)
        assert statuses == [{"runs_read": 1, "runs_found": 3}]
        release.set()
        assert service.run_names() == list(RUNS)
        assert service.reading_status() is None
    finally:
        release.set()
        service.stop()
