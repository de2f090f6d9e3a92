"""Spikes in short logs, and spikes of the logged points that the window maxima reach routinely.

A run of 200 steps logged every 10th step has 20 points; the spike detector used to judge none
under 24 (`spikes` step 11). The two recorded runs below are real MindSpore CPU trainings of
the benchmark's zoo (their hooks' `train/loss`, `train/loss_max` and `train/lr`, as logged).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

STEPS = [1, *range(10, 201, 10)]

# zoo_seen16_073: a tanh CNN under SGD at 0.84, step decay at step 130, corrupted batches at
# steps 53 and 131; the window maxima show both (3.6 and 3.8 against about 0.3 and 0.2).
CNN_LOSS = [2.13724, 0.692818, 0.401791, 0.289834, 0.26659, 0.25954, 0.338306, 0.271156, 0.279134,
            0.176021, 0.183435, 0.207458, 0.163441, 0.131476, 0.131939, 0.16639, 0.153667, 0.128309,
            0.14045, 0.137197, 0.132006]
CNN_LOSS_MAX = [2.13724, 1.8569, 0.607975, 0.433889, 0.375123, 0.298767, 3.63246, 0.309578, 0.279134,
                0.226859, 0.242448, 0.207458, 0.169342, 0.201887, 3.79784, 0.207861, 0.209192,
                0.194795, 0.174569, 0.20006, 0.224489]
CNN_LR = [0.835343] * 13 + [0.0835343] * 8

# zoo_dev_050: a float16 MLP under AdamW whose per-step loss is about 0 on most batches and 1-5
# on many others; its logged points catch such batches at steps 30-40 and 170, and its window
# maxima reach 1-5 in most windows (one NaN/Inf window: another check's event).
SATURATED_LOSS = [2.06836, 0.0372925, 0.0472717, 1.34961, 1.33887, 0.0110626, 2.38419e-07,
                  4.17233e-07, 6.55651e-07, 1.78814e-07, 0.103699, 0.0042572, 0.000103772,
                  5.96046e-08, 0.0, 0.209229, 0.000509739, 3.5957, 0.0, 0.0549316, 0.0282135]
SATURATED_LOSS_MAX = [2.06836, 2.19922, 3.64648, 5.12109, 5.24609, np.inf, 1.55664, 5.33203, 0.050415,
                      2.67773, 1.8623, 2.07227, 2.11719, 0.620605, 3.07031, 2.95312, 0.585938, 3.5957,
                      0.389404, 0.107605, 1.02734, 0.706543]
SATURATED_MAX_STEPS = [*STEPS, 202]
SATURATED_LR = [0.0173149] * 7 + [0.00173149] + [0.000173149] * 13


def signals(loss, lr, loss_max=None, max_steps=STEPS) -> RunSignals:
    scalars = {"train/loss": ScalarSeries.from_lists(STEPS, loss), "train/lr": ScalarSeries.from_lists(STEPS, lr)}
    if loss_max is not None:
        scalars["train/loss_max"] = ScalarSeries.from_lists(max_steps, loss_max)
    return RunSignals.from_run(RunData("run", scalars=scalars))


def spike_warnings(found) -> list[tuple[str, int]]:
    return sorted((f.tag, f.step) for f in found if f.kind == "loss_spike" and f.severity == "warning")


def test_corrupted_batches_in_a_log_of_21_points_are_found():
    found = check_loss_curve(signals(CNN_LOSS, CNN_LR, CNN_LOSS_MAX))
    assert spike_warnings(found) == [("train/loss_max", 60), ("train/loss_max", 140)]


def test_short_healthy_logs_raise_no_spike_warning():
    """Pure noise around a falling curve, 12-23 points logged every 10th step: Gaussian and t5
    log-noise of 10% (`bench/bench_spike_null.py` measures the rates on 400 runs a size)."""
    alarmed = []
    for points in (12, 16, 20, 23):
        steps = 10 * np.arange(1, points + 1)
        curve = np.log(0.6 + 3.0 * (1 + np.arange(points) / 2.0) ** -0.8)
        for seed in range(60):
            rng = np.random.default_rng([points, seed])
            for noise in (rng.standard_normal(points), rng.standard_t(5, points)):
                found = loss_spikes(steps, np.exp(curve + 0.1 * noise), "loss", infer_schedule(steps))
                alarmed += [(points, seed) for f in found if f.severity == "warning"]
    assert alarmed == []


def test_a_height_the_window_maxima_reach_routinely_is_no_spike():
    with_maxima = check_loss_curve(signals(SATURATED_LOSS, SATURATED_LR, SATURATED_LOSS_MAX, SATURATED_MAX_STEPS))
    assert not [s for tag, s in spike_warnings(with_maxima) if tag == "train/loss"]
    alone = check_loss_curve(signals(SATURATED_LOSS, SATURATED_LR))
    assert spike_warnings(alone), "the logged points alone cannot tell these batches are routine"


def test_maxima_that_show_the_spike_only_in_its_own_window_keep_it():
    """A one-step spike of the logged points: the maxima reach its height in its window only."""
    loss = np.array(CNN_LOSS)
    loss[6] = 3.63246  # the corrupted batch at a logged step
    found = check_loss_curve(signals(list(loss), CNN_LR, CNN_LOSS_MAX))
    assert ("train/loss", 60) in spike_warnings(found)
