"""Real MindSpore CPU trainings through `tb-health check`: a healthy run and a learning-rate blow-up."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.detection import cases_mindspore
from bench.detection.events import write_scalars
from tb_health_plugin.cli import main


@pytest.mark.mindspore
def test_a_learning_rate_jump_in_a_real_training_is_reported_as_divergence(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TB_HEALTH_BENCH_CACHE", str(tmp_path / "cache"))
    base = {"data_seed": 1, "steps": 300, "batch": 32, "warmup": 0, "cosine": False, "interval": 1,
            "averaged": False, "window_max": False}
    specs = [
        dict(base, name="healthy", scenario="healthy", seed=1, lr=0.05),
        dict(base, name="blowup", scenario="lr_high", seed=2, lr=0.05, lr_high_from=180, lr_factor=60.0),
    ]
    paths = cases_mindspore.ensure_trained(specs)
    logdir = tmp_path / "logs"
    for spec in specs:
        steps, loss, _ = cases_mindspore.logged(spec, np.load(paths[spec["name"]])["loss"])
        write_scalars(logdir / spec["name"], {"loss": (steps, loss)})
    assert main(["check", str(logdir), "--format", "json"]) == 1
    runs = {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["healthy"]["status"] == "healthy"
    divergence = [f for f in runs["blowup"]["findings"] if f["kind"] == "divergence"]
    assert divergence and divergence[0]["severity"] == "critical"
    assert abs(divergence[0]["step"] - 181) <= 3  # logged steps count from 1; the jump is at 180


@pytest.mark.mindspore
def test_a_rise_around_a_nan_episode_it_recovered_from_is_part_of_that_finding(tmp_path, monkeypatch, capsys):
    """Two corrupted batches (inputs scaled 5.6x, random labels) make the loss Inf for two steps
    of a real training; the update they caused throws the finite loss after them up 30x, and it
    takes about 40 steps to come back. One event: the non-finite finding carries the alarm and
    the advice, the rise around it is `info`, `part_of` it (issue 14: findings about one event
    must not repeat each other). A rise that never ended would be the divergence itself."""
    monkeypatch.setenv("TB_HEALTH_BENCH_CACHE", str(tmp_path / "cache"))
    spec = {"name": "corrupt", "scenario": "corrupt", "seed": 709, "data_seed": 9, "steps": 600, "batch": 64,
            "lr": 0.0764, "warmup": 0, "cosine": True, "interval": 1, "averaged": False, "window_max": False,
            "corrupt_at": 424, "corrupt_steps": 2, "corrupt_scale": 5.57}
    loss = np.load(cases_mindspore.ensure_trained([spec])["corrupt"])["loss"]
    assert not np.isfinite(loss[424:426]).any() and np.isfinite(loss[426:]).all()
    assert np.median(loss[430:445]) > 10 * np.median(loss[400:420])  # the rise after the episode
    steps, logged, _ = cases_mindspore.logged(spec, loss)
    write_scalars(tmp_path / "logs" / "corrupt", {"loss": (steps, logged)})
    main(["check", str(tmp_path / "logs"), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    alarms = [f for f in findings if f["severity"] != "info"]
    assert [(f["kind"], f["step"]) for f in alarms] == [("nonfinite", 425)]
    rise = [f for f in findings if f["kind"] == "divergence"]
    assert len(rise) == 1 and rise[0]["evidence"]["part_of"] == "nonfinite"
    assert rise[0]["step"] <= 425 <= 426 <= rise[0]["end_step"]
