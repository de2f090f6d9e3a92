"""The spike detector's noise scale where a running median passes through the logged points.

zoo_seen16_089 (a 2-layer GELU MLP under SGD at 0.036, 279 steps, our hooks' monitor logging
every 5th step) is healthy: its loss falls from 2.1 to 0.08, the noise smaller than the fall
between logged points in the first half (monotone points), larger than it in the second. A
33-point running median passed through the monotone points, so the residuals' MAD was 0 and
the ordinary wiggles of the second half (1.5x) came out at z-scores of 430,000: two spike
warnings. The values below are that run's logged loss, as its event file holds them (3 digits).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes, second_difference_mad

STEPS = np.array([1, *range(5, 280, 5)])
LOSS = np.array([
    2.11, 2.08, 2.07, 2.04, 2.02, 1.97, 1.95, 1.93, 1.91, 1.88, 1.84, 1.78, 1.78, 1.64, 1.58, 1.48,
    1.53, 1.32, 1.33, 1.23, 1.17, 0.992, 0.97, 0.963, 0.735, 0.685, 0.674, 0.637, 0.622, 0.419, 0.526,
    0.468, 0.388, 0.493, 0.387, 0.286, 0.338, 0.184, 0.268, 0.234, 0.19, 0.309, 0.168, 0.171, 0.149,
    0.103, 0.146, 0.1, 0.137, 0.107, 0.135, 0.069, 0.111, 0.0816, 0.171, 0.111,
])


def test_a_healthy_log_whose_points_are_monotone_in_places_has_no_spike():
    assert STEPS.size == LOSS.size
    assert loss_spikes(STEPS, LOSS, "train/loss", infer_schedule(STEPS)) == []


def test_spikes_in_that_log_are_still_found():
    """Corrupted batches of the zoo label's size (adding half the starting loss or more): 6x at
    step 150, in the monotone half, and 10x at step 220, in the noisy one."""
    for index, factor in ((30, 6.0), (44, 10.0)):
        lifted = LOSS.copy()
        lifted[index] *= factor
        assert lifted[index] - LOSS[index] > 0.5 * np.median(LOSS[:5])
        found = loss_spikes(STEPS, lifted, "train/loss", infer_schedule(STEPS))
        assert [f.step for f in found] == [STEPS[index]]


def test_second_differences_see_the_noise_and_not_a_straight_trend():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(20_000)
    nothing_left_out = np.zeros(noise.size, dtype=bool)
    # the MAD of standard Gaussian noise is 0.6745
    assert abs(second_difference_mad(noise, nothing_left_out) - 0.6745) < 0.02
    trend = np.linspace(3.0, -2.0, noise.size)
    assert second_difference_mad(trend, nothing_left_out) < 1e-9
    assert abs(second_difference_mad(trend + noise, nothing_left_out) - 0.6745) < 0.02
    # too few usable points: no estimate
    assert second_difference_mad(noise[:11], nothing_left_out[:11]) == 0.0
