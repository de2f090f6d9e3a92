"""The zoo's objective labels: vanishing gradients by the detectors' definition, blow-ups that are no creep."""

from __future__ import annotations

import numpy as np

from bench.detection import zoo_labels


def every_step(k: int, persistent: bool = True, nonfinite: bool = False) -> int:
    return k + 1


def test_a_layer_whose_gradient_is_exactly_zero_is_vanishing():
    rng = np.random.default_rng(0)
    layers = [np.abs(rng.normal(1.0, 0.1, 100)) for _ in range(3)]
    layers[1][20:] = 0.0
    assert zoo_labels.layer_vanishing(layers)


def test_first_layers_a_thousand_times_weaker_than_the_last_are_vanishing():
    rng = np.random.default_rng(1)
    layers = [np.abs(rng.normal(1.0, 0.1, 100)) * 10.0 ** -(4 - 0.8 * d) for d in range(6)]
    assert zoo_labels.layer_vanishing(layers)


def test_layers_within_a_decade_of_each_other_are_not_vanishing():
    rng = np.random.default_rng(2)
    layers = [np.abs(rng.normal(1.0, 0.1, 100)) * 10.0 ** (-0.2 * d) for d in range(6)]
    assert not zoo_labels.layer_vanishing(layers)


def test_a_flat_loss_that_turns_nan_is_a_blow_up_not_a_slow_creep():
    rng = np.random.default_rng(3)
    loss = 2.1 * (1 + 0.0002 * np.arange(200)) * np.exp(0.005 * rng.standard_normal(200))
    loss[70:] = np.nan  # flat within 1.4% (its least point early), then NaN
    labels, creep = zoo_labels.label_run(loss, np.ones(200), every_step)
    assert "divergence" in labels and not creep
