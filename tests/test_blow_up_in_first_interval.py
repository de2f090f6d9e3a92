"""A loss non-finite from its first logged point: inputs to check, or a blow-up nobody logged?

Issue 14 (case 3): a run that started finite and blew up inside the first logging window was told
its loss "was never logged finite: check the inputs, the labels and the initialisation". The
zoo's `zoo_seen3_027` and `074` (Hugging Face-style logs every 20th step, SGD/momentum at a
learning rate of 4-10) log a loss of Inf at step 20 and NaN after, and a gradient norm of
1.7e12-2.4e15 at step 20, NaN after: a finite gradient norm means the passes computed finite
values from those inputs and that initialisation, so the advice is the learning rate's.
"""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.readers import read_logdir
from tests.eventlogs import write_scalars

STEPS = np.arange(20, 201, 20)
NAN_AFTER_FIRST = np.concatenate([[np.inf], np.full(STEPS.size - 1, np.nan)])


def divergence_of(tmp_path, grad_norm: np.ndarray) -> tuple[str, str, dict]:
    write_scalars(tmp_path / "run", {
        "train/loss": (STEPS, NAN_AFTER_FIRST),
        "train/grad_norm": (STEPS, grad_norm),
        "train/learning_rate": (STEPS, np.full(STEPS.size, 4.0)),
    })
    signals = RunSignals.from_run(read_logdir(tmp_path)[0])
    found = [f for f in check_loss_curve(signals) if f.kind == "divergence"]
    assert len(found) == 1 and found[0].severity == "critical" and found[0].step == 20
    return render_finding(found[0], "en")["message"], render_finding(found[0], "zh")["message"], found[0].evidence


def test_a_finite_gradient_norm_at_the_first_point_says_it_blew_up_in_the_first_interval(tmp_path):
    grad = np.concatenate([[1.67e12], np.full(STEPS.size - 1, np.nan)])
    english, chinese, evidence = divergence_of(tmp_path, grad)
    assert "never logged finite" not in english and "check the inputs" not in english
    assert "blew up within the first logging interval" in english and "learning rate is far too high" in english
    assert "1.67e+12 at step 20" in english
    assert "第一个记录间隔内" in chinese and "学习率" in chinese and "检查输入" not in chinese
    assert evidence["first_finite_grad_norm"] == pytest.approx(1.67e12, rel=1e-6) and evidence["first_finite_grad_norm_step"] == 20


def test_a_gradient_norm_never_finite_either_still_points_to_the_inputs(tmp_path):
    english, chinese, evidence = divergence_of(tmp_path, np.full(STEPS.size, np.nan))
    assert "never logged finite: check the inputs, the labels and the initialisation" in english
    assert "first_finite_grad_norm" not in evidence
