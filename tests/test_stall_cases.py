"""Stalled convergence on a real MindSpore training stuck at chance after its first steps, and
not on a healthy run under cosine warm restarts."""

from __future__ import annotations

import json

import pytest

from bench.detection import cases_signals, cases_zoo, zoo_labels
from tb_health_plugin.cli import main


@pytest.mark.mindspore
def test_a_classifier_stuck_at_chance_after_its_first_steps_is_stalled(tmp_path, monkeypatch, capsys):
    # A 3-layer sigmoid MLP under AdamW (lr 0.012, batch 8, step decay at 70%), logged by our
    # HealthMonitor every 5 steps: its first steps take the loss from 2.4 to chance level
    # (ln 8 = 2.08), where it sits for the rest of the run. The stall test used to be skipped
    # for any run that improved during warm-up.
    monkeypatch.setenv("TB_HEALTH_ZOO_CACHE", str(tmp_path / "cache"))
    spec = cases_zoo.draw_spec("dev", 11)
    assert (spec["arch"], spec["activation"], spec["optimizer"], spec["logging"]) == ("mlp", "sigmoid", "adamw",
                                                                                      "hooks_monitor")
    cases_zoo.ensure_trained([spec])
    run = cases_zoo.load(spec)
    assert zoo_labels.stalled_run(run.loss, run.lr)  # the objective rule agrees: it did not learn
    logdir = tmp_path / "logs"
    cases_zoo._copy_logs(run.logs, logdir / "stuck")
    main(["check", str(logdir), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    stalls = [f for f in findings if f["kind"] == "stalled_convergence"]
    assert stalls and stalls[0]["severity"] == "warning"


def test_a_healthy_run_under_warm_restarts_is_not_stalled(tmp_path, capsys):
    # Its rate falls under half the peak within the first cycle, so the settled domain is a
    # fraction of a doubling of steps: a loss that fell fast in warm-up moves only a few
    # percent there and keeps learning over the restarts.
    case = next(c for c in cases_signals.synthetic_cases("dev") if c.name == "sig_dev_lr_sgdr_00")
    assert case.healthy
    case.write(tmp_path / "sgdr")
    main(["check", str(tmp_path), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    assert not [f for f in findings if f["kind"] == "stalled_convergence" and f["severity"] != "info"]
