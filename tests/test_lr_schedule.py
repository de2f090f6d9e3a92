"""The learning-rate check: fitted shapes stay quiet, resets/jumps/zero/early floors are reported."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis.checks.lr_schedule import lr_schedule_check
from tb_health_plugin.analysis.detectors.lr_fit import analyse_lr, fit_shape
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.series import Backtrack, RunData, ScalarSeries

N = 1000
STEPS = np.arange(N)
PEAK, FLOOR, WARM = 1e-3, 1e-5, 50


def warmup_then(decay: np.ndarray) -> np.ndarray:
    lr = decay.copy()
    lr[:WARM] = PEAK * (np.arange(WARM) + 1) / WARM
    return lr


X = np.clip((STEPS - WARM) / (N - WARM), 0, 1)
SCHEDULES = {
    "cosine": warmup_then(FLOOR + (PEAK - FLOOR) * 0.5 * (1 + np.cos(np.pi * X))),
    "linear": warmup_then(FLOOR + (PEAK - FLOOR) * (1 - X)),
    "step": np.where(STEPS < 500, 0.1, np.where(STEPS < 750, 0.01, 0.001)),
    "wsd": warmup_then(np.where(X < 0.8, PEAK, FLOOR + (PEAK - FLOOR) * (1 - (X - 0.8) / 0.2))),
    "constant": np.full(N, PEAK),
    "inverse_sqrt": warmup_then(PEAK / np.sqrt(1 + 20 * X)),
}


@pytest.mark.parametrize("shape", sorted(SCHEDULES))
def test_warmup_plus_decay_schedules_are_fitted_and_not_problems(shape):
    analysis = analyse_lr(STEPS, SCHEDULES[shape])
    assert analysis.problems == []
    assert analysis.shape == shape


def test_cosine_restarts_are_a_cyclic_schedule_not_a_reset():
    one = FLOOR + (PEAK - FLOOR) * 0.5 * (1 + np.cos(np.pi * np.arange(250) / 250))
    analysis = analyse_lr(STEPS, np.tile(one, 4))
    assert analysis.shape == "cyclic" and analysis.problems == []


def test_a_restart_after_a_resume_is_a_reset_tied_to_the_resume():
    lr = np.r_[SCHEDULES["cosine"][:600], SCHEDULES["cosine"][:400]]
    problems = analyse_lr(STEPS, lr, resume_steps=[600]).problems
    assert [p.what for p in problems] == ["reset"]
    assert problems[0].evidence["after_resume"] and 600 <= problems[0].index <= 602


def test_an_upward_jump_outside_warmup_is_reported():
    lr = SCHEDULES["cosine"].copy()
    lr[500:] *= 3
    problems = analyse_lr(STEPS, lr).problems
    assert [(p.what, p.index) for p in problems] == [("jump", 500)]


def test_a_rate_at_zero_long_before_the_end_is_critical():
    lr = SCHEDULES["linear"].copy()
    lr[400:] = 0.0
    problems = analyse_lr(STEPS, lr).problems
    assert [(p.what, p.severity, p.index) for p in problems] == [("zero", "critical", 400)]


def test_decaying_to_zero_exactly_at_the_end_is_fine():
    lr = warmup_then(PEAK * 0.5 * (1 + np.cos(np.pi * X)))
    assert analyse_lr(STEPS, lr).problems == []


def test_a_schedule_stepped_per_micro_batch_reaches_its_floor_far_too_early():
    fast = SCHEDULES["cosine"][::8]
    lr = np.r_[fast, np.full(N - fast.size, fast[-1])]
    problems = analyse_lr(STEPS, lr).problems
    assert [p.what for p in problems] == ["early_floor"]
    assert problems[0].index < 130 and problems[0].evidence["speedup_estimate"] > 5


def test_fit_shape_names_plain_decays():
    x = np.linspace(0, 1, 200)
    assert fit_shape(1 - x) == "linear"
    assert fit_shape(0.5 * (1 + np.cos(np.pi * x))) == "cosine"


def test_the_check_uses_the_readers_backtracks_and_reports_an_actionable_finding():
    lr = np.r_[SCHEDULES["cosine"][:600], SCHEDULES["cosine"][:400]]
    data = RunData(
        "run",
        scalars={"learning-rate": ScalarSeries.from_lists(STEPS, lr)},
        backtracks=[Backtrack("learning-rate", from_step=640, to_step=600, wall_time=0.0)],
    )
    findings = lr_schedule_check(RunSignals.from_run(data))
    info = [f for f in findings if f.severity == "info"]
    alarms = [f for f in findings if f.severity != "info"]
    assert len(info) == 1 and info[0].evidence["warmup_end_step"] == WARM - 1
    assert len(alarms) == 1
    reset = alarms[0]
    assert reset.kind == "lr_schedule" and reset.tag == "learning-rate"
    assert "after the resume" in reset.message and "scheduler state" in reset.message


def test_a_flat_rate_that_suddenly_leaps_is_a_jump_not_a_warmup():
    lr = np.where(STEPS < 600, 1e-3, 4e-2)
    problems = analyse_lr(STEPS, lr).problems
    assert [(p.what, p.index) for p in problems] == [("jump", 600)]
    coarse_warmup = np.r_[1e-7, np.full(N - 1, 1e-3)]  # a short warm-up logged coarsely
    assert analyse_lr(STEPS, coarse_warmup).problems == []
