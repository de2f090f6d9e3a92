"""Dynamic loss scaling: the fp16 saw-tooth is healthy; storms, steady decline and collapse are not."""

from __future__ import annotations

import numpy as np
import pytest

from bench.detection.cases_signals import dynamic_loss_scaler
from tb_health_plugin.analysis.checks.loss_scale import loss_scale_check
from tb_health_plugin.analysis.detectors.loss_scale import analyze_loss_scale
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]

FP16_MAX = 65504.0


def simulate(
    steps=8000,
    window=1000,
    forced_rate=0.0,
    forced_from=0,
    growth_every=None,
    seed=0,
    sigma=0.4,
    grad_scale=1.0,
    init=2.0**24,
    min_scale=1.0,
):
    """A dynamic loss-scale manager over gradients of random size; returns (scales, overflow flags)."""
    rng = np.random.default_rng(seed)
    grad = grad_scale * np.exp(rng.normal(0, sigma, steps))  # settles near FP16_MAX / grad_scale
    if growth_every:
        grad[forced_from:] *= 2 ** (np.arange(steps - forced_from) / growth_every)
    forced = np.zeros(steps, dtype=bool)
    forced[forced_from:] = rng.random(steps - forced_from) < forced_rate
    return dynamic_loss_scaler(init, grad, window, forced, min_scale)


def test_the_normal_sawtooth_with_its_calibration_phase_is_not_a_finding():
    scales, flags = simulate()
    steps = np.arange(scales.size)
    assert np.ptp(np.log2(scales)) >= 8  # calibration from 2^24 down, then the saw-tooth
    assert analyze_loss_scale(steps[::10], scales[::10]) == []
    assert analyze_loss_scale(steps[::10], scales[::10], (steps[::10], flags[::10])) == []


@pytest.mark.parametrize("seed", [3, 6, 9])
def test_the_initial_search_of_a_dynamic_scale_is_not_a_decline(seed):
    # PyTorch's defaults on a short run: from 2^16, halving on most of the first steps, then at
    # growing intervals as the gradients (noisy, 0.9 in log) overflow less often; a 2000-step
    # window never regrows within 3000 steps
    scales, flags = simulate(steps=3000, window=2000, sigma=0.9, grad_scale=100, init=2.0**16, seed=seed)
    steps = np.arange(1, scales.size + 1)
    assert np.log2(scales[0] / scales[-1]) >= 10 and np.all(np.diff(scales) <= 0)
    assert analyze_loss_scale(steps, scales) == []
    assert analyze_loss_scale(steps[::5], scales[::5], (steps[::5], flags[::5])) == []


def test_a_scale_held_at_its_floor_by_overflows_after_the_search_is_a_warning():
    # the gradients grow from step 3000 until the scaler's floor (128) cannot absorb them
    scales, flags = simulate(forced_from=3000, growth_every=300, min_scale=128.0, seed=1)
    steps = np.arange(scales.size)
    problems = analyze_loss_scale(steps[::10], scales[::10], (steps[::10], flags[::10]))
    floor = [p for p in problems if p.evidence["what"] == "floor"]
    assert floor and floor[0].severity == "warning" and floor[0].step > 3000
    assert floor[0].evidence["floor_scale"] == 128.0


def test_frequent_overflows_are_reported_from_the_logged_flags():
    scales, flags = simulate(forced_rate=0.1, forced_from=4000)
    steps = np.arange(scales.size)
    problems = analyze_loss_scale(steps, scales, (steps, flags))
    rates = [p for p in problems if p.evidence["what"] == "overflow_rate"]
    assert rates and rates[0].evidence["skip_rate"] > 0.05
    assert 4000 <= rates[0].step <= 4100


def test_a_steady_decline_without_regrowth_is_a_warning():
    scales, _ = simulate(forced_from=3000, growth_every=400)
    steps = np.arange(scales.size)
    problems = analyze_loss_scale(steps[::20], scales[::20])
    assert [p.evidence["what"] for p in problems] == ["decline"]
    assert problems[0].severity == "warning" and problems[0].evidence["regrowths"] >= 1


def test_a_scale_collapsing_to_its_minimum_is_critical():
    scales, _ = simulate(forced_rate=0.8, forced_from=5000)
    steps = np.arange(scales.size)
    problems = analyze_loss_scale(steps, scales)
    collapse = [p for p in problems if p.evidence["what"] == "collapse"]
    assert collapse and collapse[0].severity == "critical" and collapse[0].step > 5000


def test_a_static_scale_is_left_alone():
    assert analyze_loss_scale(np.arange(100), np.ones(100)) == []


def test_the_check_reads_mindformers_spelling_and_the_overflow_flag():
    scales, flags = simulate(forced_rate=0.3, forced_from=2000, window=50)
    steps = np.arange(scales.size)
    data = RunData(
        "run",
        scalars={
            "loss-scale": ScalarSeries.from_lists(steps, scales),
            "train/overflow": ScalarSeries.from_lists(steps, flags),
        },
    )
    findings = loss_scale_check(RunSignals.from_run(data))
    assert findings and {f.kind for f in findings} == {"loss_scale"}
    assert all(f.tag == "loss-scale" for f in findings)
    assert any(f.severity == "critical" for f in findings)


def test_a_scale_falling_by_more_halvings_than_steps_counts_at_most_every_step():
    """A scale that underflows towards 0 (Inf gradients unscaled again and again) falls by
    dozens of halvings between two logged steps; at most each of those steps overflowed."""
    scales, _ = simulate(steps=400, window=50)
    scales[300:] = 1e-30  # about 100 halvings at once, then stuck
    scales[301::3] = 1e-20  # and back up and down by ~33 halvings every few steps
    steps = np.arange(1, scales.size + 1)
    data = RunData("run", scalars={"train/loss_scale": ScalarSeries.from_lists(steps, scales)})
    (storm,) = [f for f in loss_scale_check(RunSignals.from_run(data)) if f.evidence["what"] == "overflow_rate"]
    assert 0 < storm.evidence["skip_rate"] <= 1
    assert storm.evidence["overflows"] <= storm.evidence["steps"] + 1
    share = float(english(storm).split("%")[0])
    assert share <= 100.0
