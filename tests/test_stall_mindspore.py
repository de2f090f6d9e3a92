"""A real MindSpore training stuck at chance after its first steps is a stalled convergence."""

from __future__ import annotations

import json

import pytest

from bench.detection import cases_zoo, zoo_labels
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
