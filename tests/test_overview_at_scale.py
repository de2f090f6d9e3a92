"""The overview route on a large logdir costs nothing per poll while nothing changed: the service
hands out its last overview without walking the runs, and the plugin its last body, serialised and
gzipped once; any new data, analysis or pending run makes both anew."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tb_health_plugin.service import HealthService
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"
STEPS = np.arange(300)


@pytest.fixture()
def logdir(tmp_path):
    for rank in range(2):
        write_scalars(tmp_path / "exp" / f"rank_{rank}", {"train/loss": (STEPS, 2.0 / (1 + STEPS / 30.0))})
    return tmp_path


def test_an_unchanged_overview_is_served_without_walking_the_runs(logdir, monkeypatch):
    service = HealthService(str(logdir), refresh_interval_s=3600)
    try:
        service.overview(budget_s=60)  # analyses every unit: a change during the walk, walked again next time
        first = service.overview()
        walk = service._raw_reports

        def no_walk(budget_s):
            raise AssertionError("walked the runs although nothing changed")

        monkeypatch.setattr(service, "_raw_reports", no_walk)
        assert service.overview() is first
        write_scalars(logdir / "exp" / "rank_0", {"train/loss": (np.arange(300, 320), np.full(20, 0.01))})
        monkeypatch.setattr(service, "_raw_reports", walk)
        service.refresh_now()
        service.report("exp/rank_0")  # the new data analysed
        fresh = service.overview()
        assert fresh is not first
        assert {row["run"]: row["steps"]["last"] for row in fresh["runs"]} == {"exp/rank_0": 319, "exp/rank_1": 299}
    finally:
        service.stop()


def test_an_overview_with_pending_runs_is_walked_again(logdir, monkeypatch):
    service = HealthService(str(logdir), refresh_interval_s=3600)
    monkeypatch.setattr(service, "_analyse_changed", lambda: None)  # only the route analyses here
    try:
        pending = service.overview(budget_s=0)
        assert {row["status"] for row in pending["runs"]} == {"pending"}
        done = service.overview(budget_s=60)
        assert {row["status"] for row in done["runs"]} == {"healthy"}
    finally:
        service.stop()


def test_the_runs_body_is_rendered_once_per_overview_and_gzipped_for_browsers(logdir):
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))
    client = Client(application.TensorBoardWSGI([plugin]))
    service = plugin._service
    try:
        plain = client.get(PREFIX + "/runs")
        zipped = [client.get(PREFIX + "/runs", headers={"Accept-Encoding": "gzip, deflate"}) for _ in range(3)]
        assert all(r.headers["Content-Encoding"] == "gzip" for r in zipped)
        assert len({r.get_data() for r in zipped}) == 1
        assert json.loads(gzip.decompress(zipped[0].get_data())) == json.loads(plain.get_data())
        assert plugin._runs_bodies.renders == 1
        write_scalars(logdir / "exp" / "rank_1", {"train/loss": (np.arange(300, 320), np.full(20, np.nan))})
        service.refresh_now()
        service.report("exp/rank_1")
        after = json.loads(client.get(PREFIX + "/runs").get_data())
        assert plugin._runs_bodies.renders == 2
        assert {row["run"]: row["status"] for row in after["runs"]}["exp/rank_1"] == "critical"
    finally:
        service.stop()


def test_rebuilding_the_overview_lists_the_runs_a_fixed_number_of_times(tmp_path):
    """Each run's roles once listed every run to forget deleted ones: quadratic in the runs (tens of
    seconds of CPU per rebuild with 10,000 runs). Deleted runs are now forgotten once per rebuild."""
    import shutil

    for job in range(10):
        for rank in range(2):
            write_scalars(tmp_path / f"job{job}" / f"rank_{rank}", {"train/loss": (STEPS, 2.0 / (1 + STEPS / 30.0))})
    service = HealthService(str(tmp_path), refresh_interval_s=3600)
    try:
        service.overview(budget_s=60)
        listings = []
        real = service._reader.run_names
        service._reader.run_names = lambda: listings.append(1) or real()
        service._overview.clear()  # force a rebuild, every run's roles resolved anew (as after new data)
        service._roles.clear()
        service.overview(budget_s=60)
        assert len(listings) <= 3  # not once per run (20 runs here)
        service._reader.run_names = real
        shutil.rmtree(tmp_path / "job0")
        service.refresh_now()
        overview = service.overview(budget_s=60)
        assert len(overview["runs"]) == 18
        assert not [run for run in service._roles if run.startswith("job0/")]
    finally:
        service.stop()
