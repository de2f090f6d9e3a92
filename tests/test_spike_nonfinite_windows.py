"""A spike just after a logged window that held NaN/Inf steps is part of that failure (spikes,
step 9), although the window's own value is finite: our hooks' window loss and maxima are taken
over the window's finite steps, and `train/nonfinite_count` says the window held others.

zoo_seen20_016 (a float16 MLP under AdamW, window maxima logged every 5 steps): a non-finite
step in the window ending at step 160, then window maxima 18x above the trend over the next
eight windows, reported as a spike beside the non-finite finding. The series here is of that
shape: a falling loss with 5% log-noise, and the eight windows after the counted one lifted.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes


def _window_maxima() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(16)
    steps = np.arange(5, 445, 5)
    values = (0.3 + 2.0 * np.exp(-steps / 80.0)) * np.exp(0.05 * rng.standard_normal(steps.size))
    after = (steps > 160) & (steps <= 200)
    values[after] *= 18.0
    return steps, values


def test_spike_after_a_window_that_held_nonfinite_steps_is_not_reported():
    steps, values = _window_maxima()
    schedule = infer_schedule(steps)
    alone = loss_spikes(steps, values, "train/loss_max", schedule, what="loss_window_max")
    assert [(f.step, f.end_step) for f in alone] == [(165, 200)]  # without the count: a spike
    counted = loss_spikes(steps, values, "train/loss_max", schedule, what="loss_window_max",
                          nonfinite_steps=np.array([160]))
    assert counted == []


def test_a_counted_window_elsewhere_leaves_the_spike():
    steps, values = _window_maxima()
    found = loss_spikes(steps, values, "train/loss_max", infer_schedule(steps), what="loss_window_max",
                        nonfinite_steps=np.array([100, 300]))
    assert [(f.step, f.end_step) for f in found] == [(165, 200)]


def _signals(steps: np.ndarray, values: np.ndarray, counts: dict[int, float], overflows: dict[int, float] | None):
    from tb_health_plugin.analysis.signals import RunSignals
    from tb_health_plugin.run_data import RunData, ScalarSeries

    scalars = {
        "train/loss_max": ScalarSeries.from_lists(steps, values),
        "train/loss": ScalarSeries.from_lists(steps, values / 2.0),
        "train/nonfinite_count": ScalarSeries.from_lists(steps, [counts.get(int(s), 0.0) for s in steps]),
    }
    if overflows is not None:
        scalars["train/overflow_count"] = ScalarSeries.from_lists(steps, [overflows.get(int(s), 0.0) for s in steps])
    return RunSignals.from_run(RunData("run", scalars=scalars))


def test_a_window_whose_nonfinite_values_the_loss_scaler_skipped_leaves_the_spike():
    """With dynamic loss scaling the hooks count an overflowed step's Inf gradient norm, and its
    update is thrown away (`trainer_hooks.stopping.nonfinite_update`): nothing was damaged, so a
    jump beside that window is the run's own. A window holding more non-finite values than its
    overflows (a NaN loss as well) is damage, and the jump beside it part of it."""
    from tb_health_plugin.analysis.checks.loss import check_spikes

    def spikes(counts, overflows):
        found = check_spikes(_signals(steps, values, counts, overflows))
        return [(f.step, f.end_step) for f in found if f.kind == "loss_spike"]

    steps, values = _window_maxima()
    assert spikes({}, None) == [(165, 200)]  # the same series without any count: the spike is found
    assert spikes({160: 1.0}, {160: 1.0}) == [(165, 200)]  # one overflow, skipped: the spike stays
    assert spikes({160: 2.0}, {160: 1.0}) == []  # more than the overflows: damage
    assert spikes({160: 1.0}, None) == []  # no overflow count logged: nothing explains the window


def test_the_nonfinite_check_excuses_the_same_skipped_overflows():
    """The non-finite check reads the same windows by the same rule as the spike detector's
    step 9 (and the grad-norm check's flagged overflow steps): a window whose only non-finite
    value is an overflow the loss scaler skipped is dynamic loss scaling working, no alarm; more
    non-finite values than overflows, or no overflow count logged, is a non-finite finding."""
    from tb_health_plugin.analysis.checks.loss import check_nonfinite

    def nonfinite(counts, overflows):
        return [(f.step, f.severity) for f in check_nonfinite(_signals(steps, values, counts, overflows))
                if f.kind == "nonfinite"]

    steps, values = _window_maxima()
    assert nonfinite({160: 1.0}, {160: 1.0}) == []
    assert nonfinite({160: 2.0}, {160: 1.0}) == [(160, "warning")]
    assert nonfinite({160: 1.0}, None) == [(160, "warning")]
