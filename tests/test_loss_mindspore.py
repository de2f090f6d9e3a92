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
