"""A gradient norm that grows by decades while the loss keeps falling is learning, not exploding.

The series follow a real zoo training (5-layer sigmoid MLP, Adam lr=1.2e-3, batch 64, float16,
248 steps logged every step): its first layer's gradient norm started near 1e-4 (the signal
hardly reached it) and grew 2,400x to 0.23 as the network left its plateau and the loss began
to fall (2.09 to 1.67). The anchors below are that run's values every 12th step; the noise has
its measured size (0.2 decades on the norm, 1.1% on the loss).
"""

from __future__ import annotations

import numpy as np

from bench.detection import zoo_labels
from tb_health_plugin.analysis.checks.gradients import gradient_check
from tb_health_plugin.analysis.detectors.gradient_norms import exploding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

STEPS = np.arange(1, 249)
ANCHOR_STEPS = np.arange(1, 249, 12)
FIRST_LAYER_LOG10_NORM = [-4.01, -4.06, -4.03, -3.97, -3.91, -3.88, -3.75, -3.79, -3.66, -3.57, -3.37,
                          -3.25, -3.02, -2.68, -2.61, -2.51, -2.17, -2.01, -2.07, -1.81, -1.32]
LOSS = [2.156, 2.092, 2.082, 2.057, 2.072, 2.082, 2.080, 2.084, 2.104, 2.080, 2.076, 2.090, 2.092, 2.072,
        2.057, 2.018, 1.948, 1.858, 1.807, 1.713, 1.671]


def plateau_escape(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(first layer's gradient norm, loss) per logged step, as in the run described above."""
    rng = np.random.default_rng(seed)
    norm = 10.0 ** (np.interp(STEPS, ANCHOR_STEPS, FIRST_LAYER_LOG10_NORM) + rng.normal(0, 0.2, STEPS.size))
    loss = np.interp(STEPS, ANCHOR_STEPS, LOSS) * np.exp(rng.normal(0, 0.011, STEPS.size))
    return norm, loss


def test_a_norm_growing_while_the_loss_falls_is_not_exploding():
    for seed in range(5):
        norm, loss = plateau_escape(seed)
        assert exploding(norm) is not None  # 2,400x growth: alone, it would be reported
        assert exploding(norm, loss, STEPS) is None, seed


def test_the_same_growth_while_the_loss_stays_flat_or_rises_is_exploding():
    norm, loss = plateau_escape()
    flat = np.full(STEPS.size, 2.08) * np.exp(np.random.default_rng(1).normal(0, 0.011, STEPS.size))
    assert exploding(norm, flat, STEPS) is not None
    rising = loss[::-1].copy()  # the loss rises 25% while the norm grows
    assert exploding(norm, rising, STEPS) is not None


def test_a_loss_that_learned_before_the_rise_and_not_through_it_does_not_excuse_it():
    """A run that fell from 2.1 to 0.5, then rebounded to 1.0 while its norm grew 100x+: the loss
    over the rise is below where the run started, yet above where it stood before the rise."""
    rng = np.random.default_rng(2)
    loss = np.r_[np.geomspace(2.1, 0.5, 100), np.full(50, 0.5), np.geomspace(0.5, 1.0, 100)]
    loss = loss * np.exp(rng.normal(0, 0.011, loss.size))
    norm = np.r_[np.ones(150), np.geomspace(1, 1e3, 100)] * 10.0 ** rng.normal(0, 0.2, loss.size)
    assert exploding(norm, loss) is not None


def test_the_per_layer_check_lets_a_layer_grow_while_the_run_learns():
    """The run's other layers keep their level; only the first one grows (the zoo run's shape)."""
    norm, loss = plateau_escape()
    rng = np.random.default_rng(3)
    scalars = {"train/loss": ScalarSeries.from_lists(STEPS, loss),
               "grad_norm/0.weight": ScalarSeries.from_lists(STEPS, norm)}
    for depth, level in ((2, 3e-4), (4, 1.3e-3), (6, 1e-2), (8, 6e-2), (10, 0.4)):
        values = level * 10.0 ** rng.normal(0, 0.2, STEPS.size)
        scalars[f"grad_norm/{depth}.weight"] = ScalarSeries.from_lists(STEPS, values)
    signals = RunSignals.from_run(RunData(name="run", scalars=scalars))
    assert "exploding_gradients" not in {f.kind for f in gradient_check(signals)}


def every_step(k: int, persistent: bool = True, nonfinite: bool = False) -> int:
    return k + 1


def test_the_zoo_label_applies_the_same_definition():
    norm, loss = plateau_escape()
    assert "exploding_gradients" not in zoo_labels.label_run(loss, norm, every_step)[0]
    rising = loss[::-1].copy()
    assert "exploding_gradients" in zoo_labels.label_run(rising, norm, every_step)[0]


def test_a_zoo_run_whose_logs_carry_no_gradient_norm_gets_no_gradient_label(tmp_path):
    """A zoo blow-up (1-layer MLP, SGD lr=3.8, float16): its raw norm climbed 30,000x before NaN.
    Logged by a path that writes the loss and the rate only, no detector can see that climb."""
    from bench.detection.cases_zoo import ZooRun, labels_for

    grad = np.full(200, np.nan)
    grad[:9] = [2.4, 12.05, 26.7, 95.1, 404.9, 1960.0, 3252.0, 14180.0, 72160.0]
    loss = np.full(200, np.nan)
    loss[:9] = [2.05, 10.39, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf]
    spec = {"logging": "hooks_logger", "log_every": 1, "steps": 200}
    run = ZooRun(spec, loss, grad, np.full(200, 3.8), np.full(200, 0.01), tmp_path)
    assert "exploding_gradients" in labels_for(run)[0]  # logged with `train/grad_norm`
    no_norm = ZooRun(dict(spec, logging="custom"), loss, grad, run.lr, run.step_time, tmp_path)
    assert "exploding_gradients" not in labels_for(no_norm)[0]
    assert "nonfinite" in labels_for(no_norm)[0]  # what its logs do show


def test_a_climb_inside_the_first_logging_interval_is_not_labelled(tmp_path):
    """The same blow-up logged every 10 steps: the first logged norm is already NaN."""
    from bench.detection.cases_zoo import ZooRun, labels_for

    grad = np.full(200, np.nan)
    grad[:9] = [2.4, 12.05, 26.7, 95.1, 404.9, 1960.0, 3252.0, 14180.0, 72160.0]
    loss = np.full(200, np.nan)
    loss[:9] = [2.05, 10.39, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf]
    every_10 = ZooRun({"logging": "mindformers", "log_every": 10, "steps": 200}, loss, grad,
                      np.full(200, 3.8), np.full(200, 0.01), tmp_path)
    assert "exploding_gradients" not in labels_for(every_10)[0]
    every_step = ZooRun(dict(every_10.spec, log_every=1), loss, grad, every_10.lr, every_10.step_time, every_10.logs)
    assert "exploding_gradients" in labels_for(every_step)[0]
