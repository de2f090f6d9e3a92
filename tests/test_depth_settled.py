"""The depth imbalance is judged after the first tenth of the points, as the zoo's label is: an
Adam run's deep sigmoid stack that starts 1000x apart and closes the gap while learning."""

from __future__ import annotations

import numpy as np

from bench.detection import zoo_labels
from tb_health_plugin.analysis.detectors.layer_depth import depth_imbalance


def closing_gap(points: int = 248, layers: int = 6, seed: int = 0) -> np.ndarray:
    """Per-layer norms (layers, points): the first third 10^-3.1 below the last third over the
    first tenth, the gap closing to 10^-1.4 by the end (zoo_dev_031's profile), 0.1-decade
    scatter per point."""
    rng = np.random.default_rng(seed)
    t = np.arange(points) / points
    gap = np.where(t < 0.1, -3.1, -3.1 + (t - 0.1) / 0.9 * 1.7)
    depth_share = np.repeat([1.0, 0.5, 0.0], layers // 3)[:, None]  # the first third gets the whole gap
    return 0.4 * 10 ** (gap[None, :] * depth_share + rng.normal(0, 0.1, (layers, points)))


def test_a_gap_that_closes_after_the_first_tenth_is_not_vanishing():
    for seed in range(3):
        norms = closing_gap(seed=seed)
        assert not zoo_labels.layer_vanishing(list(norms))
        assert depth_imbalance(norms) is None


def test_a_gap_held_over_the_run_is_still_vanishing_from_its_first_point():
    rng = np.random.default_rng(4)
    norms = 0.4 * 10 ** (np.repeat([-3.5, -1.5, 0.0], 2)[:, None] + rng.normal(0, 0.1, (6, 248)))
    assert zoo_labels.layer_vanishing(list(norms))
    event = depth_imbalance(norms)
    assert event is not None and event.kind == "vanishing_gradients" and event.step == 0
