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


def test_the_worker_sends_its_first_reads_progress_and_the_plugin_shows_it(tmp_path, monkeypatch):
    """The worker publishes what it read only when its first read ends (minutes on 10,000 runs):
    meanwhile it sends how many runs it read, and the plugin's side says that, not 0."""
    from tb_health_plugin.worker import WorkerService
    from tb_health_plugin.worker_host import PublishingService

    write_runs(tmp_path)
    sent, progress_seen, release = [], threading.Event(), threading.Event()

    def send(message):
        sent.append(message)
        if message[0] == "reading" and message[1]["runs_read"] >= 1:
            progress_seen.set()

    read_run = LogdirReader._read_run

    def paused(run, files):  # the first read stops at "b" until the progress was sent
        if run.name == "b" and not release.is_set():
            release.wait(30)
        return read_run(run, files)

    monkeypatch.setattr(LogdirReader, "_read_run", staticmethod(paused))
    service = PublishingService(str(tmp_path), 60, send)
    reader = threading.Thread(target=service.refresh_now)
    try:
        reader.start()
        assert progress_seen.wait(30)
        release.set()
        reader.join(30)
        assert not reader.is_alive()
        service.refresh_now()  # later refreshes send no progress
    finally:
        release.set()
        service.stop()
    kinds = [kind for kind, _ in sent]
    assert kinds.count("reading") >= 1 and kinds.index("reading") < kinds.index("listing")
    assert kinds[kinds.index("listing"):].count("reading") == 0
    assert ("reading", {"runs_read": 1, "runs_found": 3}) in sent

    plugin_side = WorkerService(str(tmp_path))  # fed the messages the worker sent, no process
    plugin_side._handle(("listing", {"names": list(RUNS), "changed": {}, "partial": True}))
    assert plugin_side.reading_status() == {"runs_read": 0, "runs_found": 3}
    plugin_side._handle(("reading", {"runs_read": 1, "runs_found": 3}))
    assert plugin_side.reading_status() == {"runs_read": 1, "runs_found": 3}
    for message in sent:
        if message[0] == "listing":
            plugin_side._handle(message)
    assert plugin_side.reading_status() is None
