"""The overview's job roll-ups, computed once by the server (the tab only sorts and filters), and
cached per data version."""

from __future__ import annotations

import json

import numpy as np
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tb_health_plugin.views.overview import job_summaries, job_summary, run_summary
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"


def summary(run, status, findings=(), steps=None, last_update=None, job="exp"):
    report = {"run": run, "status": status, "steps": steps, "findings": list(findings)}
    row = run_summary(report, {}, last_update)
    row["job"] = job
    return row


def finding(kind, severity, step):
    return {"kind": kind, "severity": severity, "step": step, "message": f"{kind} at {step}", "tag": "loss"}


def test_a_job_takes_its_ranks_worst_status_and_finding_and_sums_the_rest():
    ranks = [
        summary("exp/rank_0", "warning", [finding("loss_spike", "warning", 50), finding("lr_schedule", "info", 1)],
                {"first": 0, "last": 900}, 10.0),
        summary("exp/rank_1", "critical", [finding("nonfinite", "critical", 700), finding("divergence", "critical", 300)],
                {"first": 5, "last": 1000}, 30.0),
        summary("exp/rank_2", "pending"),
    ]
    job = job_summary("exp", ranks)
    assert job["status"] == "critical"
    assert job["worst"] == {"kind": "divergence", "severity": "critical", "step": 300, "message": "divergence at 300"}
    assert job["counts"] == {"info": 1, "warning": 1, "critical": 2}
    assert job["kinds"] == ["divergence", "loss_spike", "lr_schedule", "nonfinite"]
    assert job["steps"] == {"first": 0, "last": 1000} and job["last_update"] == 30.0
    assert job["ranks"] == ["exp/rank_0", "exp/rank_1", "exp/rank_2"]


def test_pending_outranks_no_data_and_any_verdict_outranks_pending():
    assert job_summary("exp", [summary("a", "no_data"), summary("b", "pending")])["status"] == "pending"
    assert job_summary("exp", [summary("a", "healthy"), summary("b", "pending")])["status"] == "healthy"
    assert job_summary("exp", [summary("a", "no_data"), summary("b", "no_data")])["steps"] is None


def test_only_jobs_of_two_ranks_or_more_are_rolled_up():
    rows = [summary("a/rank_0", "healthy", job="a"), summary("b/rank_0", "healthy", job="b"),
            summary("b/rank_1", "warning", job="b"), summary("solo", "critical", job=None)]
    assert [job["job"] for job in job_summaries(rows)] == ["b"]


def test_runs_route_serves_the_roll_ups_and_rebuilds_them_only_for_new_data(tmp_path):
    steps = np.arange(300)
    loss = 2.0 / (1.0 + steps / 30.0)
    spiky = loss.copy()
    spiky[200] = np.nan
    write_scalars(tmp_path / "exp" / "rank_0", {"train/loss": (steps, loss)})
    write_scalars(tmp_path / "exp" / "rank_1", {"train/loss": (steps, spiky)})
    write_scalars(tmp_path / "solo" / "rank_0", {"train/loss": (steps, loss)})
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    client = Client(application.TensorBoardWSGI([plugin]))
    service = plugin._service
    try:
        body = json.loads(client.get(PREFIX + "/runs").get_data(as_text=True))
        (job,) = body["jobs"]
        members = [run for run in body["runs"] if run["job"] == "exp"]
        assert job == job_summary("exp", members) and job["status"] == "critical"
        assert service.overview() is service.overview()  # unchanged data: the cached roll-up
        write_scalars(tmp_path / "exp" / "rank_0", {"train/loss": (np.arange(300, 320), np.full(20, np.inf))})
        service.refresh_now()
        service.overview()  # the new data with the last reports, until their analysis is done
        service.report("exp/rank_0")  # the new data analysed (the background refresher's next step)
        fresh = service.overview()
        assert fresh["jobs"][0]["steps"] == {"first": 0, "last": 319}
        assert fresh["jobs"][0]["counts"]["critical"] > job["counts"]["critical"]
    finally:
        service.stop()
