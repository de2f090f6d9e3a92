"""The plugin's routes, served by TensorBoard's own WSGI app over a real logdir."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"


@pytest.fixture()
def logdir(tmp_path):
    steps = np.arange(0, 500)
    loss = 3.0 * np.exp(-steps / 200.0) + 0.5
    write_scalars(tmp_path / "exp1" / "rank_0", {"train/loss": (steps, loss), "train/lr": (steps, np.full(500, 1e-3))})
    write_scalars(tmp_path / "exp1" / "rank_1", {"train/loss": (steps, loss * 1.01)})
    spiky = loss.copy()
    spiky[300] = 50.0
    spiky[400] = np.nan
    write_scalars(tmp_path / "spiky", {"loss": (steps, spiky), "grad-norm": (steps, np.ones(500))})
    return tmp_path


@pytest.fixture(params=[False, True], ids=["in-process", "worker"])
def client(logdir, request):
    """The routes answer alike whether the plugin reads in this interpreter or in its worker."""
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)), worker=request.param)
    client = Client(application.TensorBoardWSGI([plugin]))
    if request.param:  # the worker's `runs` answers without waiting for it: wait for its analyses here
        while json.loads(client.get(PREFIX + "/runs").get_data(as_text=True))["analysis"]["state"] != "idle":
            time.sleep(0.05)
    yield client
    plugin._service.stop()


def get(client, path, expect=200):
    response = client.get(PREFIX + path)
    text = response.get_data(as_text=True)
    assert response.status_code == expect, text
    if expect >= 400:  # raised as tensorboard.errors.*: TensorBoard answers with the message as text
        assert response.headers["Content-Type"].startswith("text/plain")
        return {"error": text}
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(text)


def test_runs_lists_every_run_with_recognised_signals(client):
    body = get(client, "/runs")
    runs = {r["run"]: r for r in body["runs"]}
    assert set(runs) == {"exp1/rank_0", "exp1/rank_1", "spiky"}
    assert runs["exp1/rank_0"]["signals"] == {"loss": "train/loss", "lr": "train/lr"}
    assert runs["spiky"]["signals"] == {"loss": "loss", "grad_norm": "grad-norm"}
    assert runs["exp1/rank_0"]["job"] == "exp1" and runs["spiky"]["job"] is None
    assert runs["exp1/rank_0"]["steps"] == {"first": 0, "last": 499}
    assert set(runs["spiky"]["counts"]) == {"info", "warning", "critical"}


def test_report_has_contract_shape_for_one_run(client):
    body = get(client, "/report?run=spiky")
    assert body["version"] == 1
    assert [r["run"] for r in body["runs"]] == ["spiky"]
    run = body["runs"][0]
    assert run["status"] in {"healthy", "warning", "critical", "no_data"}
    assert run["steps"] == {"first": 0, "last": 499}
    assert isinstance(run["findings"], list)


def test_report_and_runs_are_written_in_the_language_asked_for(client):
    english = get(client, "/report?run=spiky")
    chinese = get(client, "/report?run=spiky&lang=zh")
    assert english["language"] == "en" and chinese["language"] == "zh"
    en_findings, zh_findings = english["runs"][0]["findings"], chinese["runs"][0]["findings"]
    assert [(f["kind"], f["step"]) for f in en_findings] == [(f["kind"], f["step"]) for f in zh_findings]
    assert en_findings and all(re.search(r"[\u4e00-\u9fff]", f["message"]) for f in zh_findings)
    runs = get(client, "/runs?lang=zh")
    assert runs["language"] == "zh" and runs["kinds"]["loss_spike"] == "损失尖峰"
    spiky = next(r for r in runs["runs"] if r["run"] == "spiky")
    assert re.search(r"[\u4e00-\u9fff]", spiky["worst"]["message"])
    assert "lang must be one of en, zh" in get(client, "/report?run=spiky&lang=fr", expect=400)["error"]


def test_unknown_run_is_404_and_missing_parameter_400(client):
    assert "unknown run" in get(client, "/report?run=nope", expect=404)["error"]
    assert "missing parameter" in get(client, "/report", expect=400)["error"]
    assert "width" in get(client, "/series?run=spiky&tag=loss&width=abc", expect=400)["error"]
    get(client, "/series?run=spiky&tag=nope", expect=404)


def test_series_envelope_keeps_a_one_step_spike_and_lists_nan(client):
    body = get(client, "/series?run=spiky&tag=loss&width=10")
    assert body["total_points"] == 500 and body["downsampled"] is True
    assert len(body["steps"]) == 10
    assert max(v for v in body["max"] if v is not None) == pytest.approx(50.0)
    assert body["nonfinite"] == [{"step": 400, "value": "nan"}]


def test_series_zoom_window(client):
    body = get(client, "/series?run=spiky&tag=loss&start=290&end=310")
    assert body["steps"][0] == 290 and body["steps"][-1] == 310
    assert body["downsampled"] is False
