"""The learning-rate check: fitted shapes stay quiet, resets/jumps/zero/early floors are reported."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis.checks.lr_schedule import lr_schedule_check
from tb_health_plugin.analysis.detectors.lr_fit import analyze_lr, fit_shape
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import Backtrack, RunData, ScalarSeries


def problems_of(*args, **kwargs) -> list:
    """The faults `analyze_lr` finds (its events after the first, which names the shape)."""
    return analyze_lr(*args, **kwargs)[1:]


def shape_of(*args, **kwargs) -> str:
    return analyze_lr(*args, **kwargs)[0].evidence["schedule"]


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]

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
    assert problems_of(STEPS, SCHEDULES[shape]) == []
    assert shape_of(STEPS, SCHEDULES[shape]) == shape


def test_cosine_restarts_are_a_cyclic_schedule_not_a_reset():
    one = FLOOR + (PEAK - FLOOR) * 0.5 * (1 + np.cos(np.pi * np.arange(250) / 250))
    events = analyze_lr(STEPS, np.tile(one, 4))
    assert events[0].evidence["schedule"] == "cyclic" and events[1:] == []


def test_a_restart_after_a_resume_is_a_reset_tied_to_the_resume():
    lr = np.r_[SCHEDULES["cosine"][:600], SCHEDULES["cosine"][:400]]
    problems = problems_of(STEPS, lr, resume_steps=[600])
    assert [p.evidence["what"] for p in problems] == ["reset"]
    assert problems[0].evidence["after_resume"] and 600 <= problems[0].step <= 602


def test_an_upward_jump_outside_warmup_is_reported():
    lr = SCHEDULES["cosine"].copy()
    lr[500:] *= 3
    problems = problems_of(STEPS, lr)
    assert [(p.evidence["what"], p.step) for p in problems] == [("jump", 500)]


def test_a_rate_at_zero_long_before_the_end_is_critical():
    lr = SCHEDULES["linear"].copy()
    lr[400:] = 0.0
    problems = problems_of(STEPS, lr)
    assert [(p.evidence["what"], p.severity, p.step) for p in problems] == [("zero", "critical", 400)]


def test_decaying_to_zero_exactly_at_the_end_is_fine():
    lr = warmup_then(PEAK * 0.5 * (1 + np.cos(np.pi * X)))
    assert problems_of(STEPS, lr) == []


def test_a_schedule_stepped_per_micro_batch_reaches_its_floor_far_too_early():
    fast = SCHEDULES["cosine"][::8]
    lr = np.r_[fast, np.full(N - fast.size, fast[-1])]
    problems = problems_of(STEPS, lr)
    assert [p.evidence["what"] for p in problems] == ["early_floor"]
    assert problems[0].step < 130 and problems[0].evidence["speedup_estimate"] > 5


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
    assert "after the resume" in english(reset) and "scheduler state" in english(reset)


def test_a_flat_rate_that_suddenly_leaps_is_a_jump_not_a_warmup():
    lr = np.where(STEPS < 600, 1e-3, 4e-2)
    problems = problems_of(STEPS, lr)
    assert [(p.evidence["what"], p.step) for p in problems] == [("jump", 600)]
    coarse_warmup = np.r_[1e-7, np.full(N - 1, 1e-3)]  # a short warm-up logged coarsely
    assert problems_of(STEPS, coarse_warmup) == []


def sgdr(steps: int, t_0: int, t_mult: int, eta_max=PEAK, eta_min=FLOOR) -> np.ndarray:
    """PyTorch's CosineAnnealingWarmRestarts, stepped once per step, as its docs define it."""
    lr, t_cur, t_i = [], 0, t_0
    for _ in range(steps):
        lr.append(eta_min + (eta_max - eta_min) * (1 + np.cos(np.pi * t_cur / t_i)) / 2)
        t_cur += 1
        if t_cur >= t_i:
            t_cur, t_i = 0, t_i * t_mult
    return np.array(lr)


@pytest.mark.parametrize("t_0, t_mult, every", [(100, 2, 1), (300, 2, 10), (200, 3, 10), (150, 2, 50), (500, 1, 10)])
def test_warm_restarts_with_periods_growing_by_t_mult_are_a_planned_cyclic_schedule(t_0, t_mult, every):
    total = 8000
    steps = np.arange(total)[::every]
    lr = sgdr(total, t_0, t_mult)[::every]
    events = analyze_lr(steps, lr)
    assert events[0].evidence["schedule"] == "cyclic" and events[1:] == []
    data = RunData("run", scalars={"train/lr": ScalarSeries.from_lists(steps, lr)})
    findings = lr_schedule_check(RunSignals.from_run(data))
    assert [f.severity for f in findings] == ["info"] and "cyclic" in english(findings[0])


def test_cyclic_rates_rising_from_a_base_are_planned():
    # triangular and triangular2 CLR: half cycles of 400 steps from base 1e-4 to 1e-3
    t = np.arange(6000)
    cycle, x = t // 800, np.abs(t / 400 - 2 * (t // 800) - 1)
    for amplitude in (9e-4 * np.maximum(0, 1 - x), 9e-4 * np.maximum(0, 1 - x) / 2.0**cycle):
        assert problems_of(t[::10], (1e-4 + amplitude)[::10]) == []


def test_resets_to_the_peak_at_irregular_steps_are_reported():
    # the scheduler restarted twice mid-decay (steps 2000 and 4500): no periodic pattern
    x = np.clip((np.arange(6000) - 100) / 5900, 0, 1)
    base = FLOOR + (PEAK - FLOOR) * 0.5 * (1 + np.cos(np.pi * x))
    base[:100] = PEAK * (np.arange(100) + 1) / 100
    lr = base.copy()
    lr[2000:] = base[100:4100]
    lr[4500:] = base[100:1600]
    problems = problems_of(np.arange(6000), lr)
    assert [(p.evidence["what"], p.severity, p.step) for p in problems] == [("reset", "warning", 2000), ("reset", "warning", 4500)]


def test_a_nan_learning_rate_is_critical():
    lr = SCHEDULES["cosine"].copy()
    lr[700:] = np.nan
    data = RunData("run", scalars={"train/lr": ScalarSeries.from_lists(STEPS, lr)})
    alarms = [f for f in lr_schedule_check(RunSignals.from_run(data)) if f.severity != "info"]
    assert [(f.severity, f.step, f.evidence["what"]) for f in alarms] == [("critical", 700, "nonfinite")]


def test_a_single_step_drop_early_in_the_run_is_no_early_floor():
    # One milestone at a fifth of the run (MultiStepLR with milestones=[200] of 1000 steps): its
    # timing shows no speed, a planned early drop and a late one stepped too fast look alike.
    lr = np.where(STEPS < 200, PEAK, PEAK * 0.1)
    assert shape_of(STEPS, lr) == "step"
    assert problems_of(STEPS, lr) == []


def test_two_step_drops_early_in_the_run_are_an_early_floor():
    # Milestones at 60% and 90% stepped eight times too fast: both drops in the first eighth.
    lr = PEAK * 0.1 ** np.searchsorted([75, 112], STEPS, side="right")
    problems = problems_of(STEPS, lr)
    assert [p.evidence["what"] for p in problems] == ["early_floor"]
    assert problems[0].step == 112
