"""A spike rises from the point before it (`spikes` step 8): the upper part of a fast fall is no
spike, however far a running median lags under it.

zoo_seen18_034 (a real MindSpore CPU training of the benchmark's zoo: a 4-layer ReLU MLP under
SGD at 0.044 with loss scaling) sat at chance level for 150 steps, then fell from 2.0 to 0.05
within 250; its window maxima fall almost monotonically, and the trend (a median over 33 points)
lagged under the upper part of the fall, where eight points stood 1.5x above it with z-scores
in the hundreds of thousands (the float16 maxima of the plateau left a MAD at its floor).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

STEPS = [1, *range(10, 481, 10)]
MAX_STEPS = [*STEPS, 489]
LOSS = [2.0625, 2.0762, 2.0645, 2.0977, 2.0801, 2.0645, 2.0352, 2.0312, 2.0254, 2.0273, 2.0039, 1.9922,
        1.9639, 1.9727, 1.9053, 1.8984, 1.918, 1.6807, 1.5859, 1.4111, 1.5596, 1.2832, 1.1895, 0.87793,
        0.90039, 0.78564, 0.60156, 0.4397, 0.35522, 0.25537, 0.16187, 0.1449, 0.10474, 0.12781, 0.06958,
        0.069946, 0.11182, 0.080566, 0.044708, 0.019852, 0.038116, 0.034058, 0.016357, 0.050507,
        0.040436, 0.037567, 0.037872, 0.01297, 0.020981]
LOSS_MAX = [2.0625, 2.1172, 2.1348, 2.1074, 2.1035, 2.0781, 2.0742, 2.0625, 2.0723, 2.0664, 2.0508,
            2.0312, 2.0273, 2.0137, 1.9873, 1.9541, 1.918, 1.8262, 1.7715, 1.7734, 1.5713, 1.4902,
            1.3906, 1.2246, 1.2373, 0.93262, 0.68799, 0.59375, 0.49414, 0.36426, 0.28369, 0.22375,
            0.21204, 0.17908, 0.15295, 0.13, 0.11182, 0.080566, 0.10413, 0.077881, 0.0578, 0.057587,
            0.068542, 0.050507, 0.08197, 0.054932, 0.080811, 0.093018, 0.093933, 0.036133]


def test_the_upper_part_of_a_fast_fall_is_no_spike():
    scalars = {
        "train/loss": ScalarSeries.from_lists(STEPS, LOSS),
        "train/loss_max": ScalarSeries.from_lists(MAX_STEPS, LOSS_MAX),
        "train/lr": ScalarSeries.from_lists(STEPS, [0.043795] * len(STEPS)),
    }
    found = check_loss_curve(RunSignals.from_run(RunData("run", scalars=scalars)))
    assert not [f for f in found if f.severity != "info"]


def test_a_spike_during_a_fast_fall_still_rises_from_the_point_before_it():
    """A corrupted batch 5x above a loss that falls from 3.6 to 1.2 within its first 25 steps
    (2% log-noise): it stands far above the point before it, which the fall keeps higher than
    the trend."""
    t = np.arange(200)
    for seed in range(5):
        y = np.log(0.6 + 3.0 * (1 + t / 4) ** -0.8) + 0.02 * np.random.default_rng(seed).standard_normal(t.size)
        y[25] += np.log(5.0)
        found = loss_spikes(t + 1, np.exp(y), "loss", infer_schedule(t + 1))
        assert [f.step for f in found if f.severity == "warning"] == [26]
