"""Stall and divergence verdicts do not depend on how densely a run was logged: the same
per-step run logged at every step, at every 5th or every 10th step (the last step's value, or
the mean of the window) gets the same verdict."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tests.logged_runs import kinds, logged

STEPS = 200
INTERVALS = (1, 5, 10)


def warmup_cosine(steps: int = STEPS, peak: float = 0.01, warmup: int = 10) -> np.ndarray:
    k = np.arange(steps, dtype=np.float64)
    decay = 0.5 * (1 + np.cos(np.pi * np.clip((k - warmup) / (steps - warmup), 0, 1)))
    return np.where(k < warmup, peak * (k + 1) / warmup, peak * decay)


def stuck_run(seed: int) -> np.ndarray:
    """A classifier that learns nothing: ln 8 with 1.5% per-step noise and no drift.

    At that noise the 8-10 points of the high-rate domain logged every 10th step measure the
    change to +-1% (one standard error), enough to resolve the 5% band of a stall; at much
    higher noise the sparse log rightly has too little evidence to call one."""
    rng = np.random.default_rng(seed)
    return np.log(8.0) * np.exp(0.015 * rng.standard_normal(STEPS))


def learning_run(seed: int) -> np.ndarray:
    """A healthy power-law decrease, from ln 8 to about a third of it, with 3% per-step noise."""
    rng = np.random.default_rng(seed)
    k = np.arange(1, STEPS + 1)
    return np.log(8.0) * k ** -0.2 * np.exp(0.03 * rng.standard_normal(STEPS))


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
@pytest.mark.parametrize("seed", range(6))
def test_a_run_stuck_at_a_high_learning_rate_is_a_stall_at_every_logging_interval(seed, means):
    loss, lr = stuck_run(seed), warmup_cosine()
    assert [kinds(loss, lr, n, means) for n in INTERVALS] == [{"stalled_convergence"}] * len(INTERVALS)


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
@pytest.mark.parametrize("seed", range(6))
def test_a_learning_run_is_healthy_at_every_logging_interval(seed, means):
    loss, lr = learning_run(seed), warmup_cosine()
    assert [kinds(loss, lr, n, means) for n in INTERVALS] == [set()] * len(INTERVALS)


@pytest.mark.parametrize("seed", range(4))
def test_a_jump_in_the_last_few_steps_is_no_divergence_at_any_logging_interval(seed):
    """Six high steps at the very end are as long as a spike: no logging interval can tell them
    from one, and the every-10th-step log does not even show them."""
    loss, lr = learning_run(seed), warmup_cosine()
    loss[-6:] *= 3.0
    assert all("divergence" not in kinds(loss, lr, n, means=False) for n in INTERVALS)


def test_a_blow_up_at_the_end_that_lasts_longer_than_a_spike_is_still_critical():
    loss, lr = learning_run(0), warmup_cosine()
    loss[-30:] *= np.geomspace(2.0, 50.0, 30)
    found = check_loss_curve(logged(loss, lr, 1, means=False))
    assert any(f.kind == "divergence" and f.severity == "critical" for f in found)


def test_non_finite_points_in_the_middle_do_not_shift_the_stall_domain():
    """The rate is indexed like the finite points kept (it used to run past them into the anneal)."""
    loss, lr = stuck_run(0), warmup_cosine()
    loss[40:110] = np.nan  # a long hole (an overflow the logger recorded as NaN)
    signals = logged(loss, lr, 1, means=False)
    from tb_health_plugin.analysis.checks.loss import schedule_for
    from tb_health_plugin.analysis.detectors.stall import stalled_convergence

    found = stalled_convergence(signals.loss.steps, signals.loss.values, "train/loss", schedule_for(signals))
    assert [f.kind for f in found] == ["stalled_convergence"]
    assert found[0].end_step <= 110  # the domain ends where the rate fell below half its peak


def noisy_stuck_run(seed: int, steps: int = 300, noise: float = 0.04) -> np.ndarray:
    """A classifier that learns nothing under 4% per-step noise (small batches), at a constant
    rate. Logged every 10th step, its 27 settled points measure the change to about +-2.5%
    (one standard error): the change itself is resolved within the 5% band, though a +-2
    standard-error interval is not."""
    rng = np.random.default_rng(seed)
    return np.log(8.0) * np.exp(noise * rng.standard_normal(steps))


def constant(steps: int = 300, lr: float = 0.01) -> np.ndarray:
    return np.full(steps, lr)


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
@pytest.mark.parametrize("seed", range(6))
def test_a_noisy_stuck_run_is_a_stall_at_every_logging_interval(seed, means):
    """The stall's criterion is the change itself (an effect size): its standard error, which
    grows by sqrt(10) on every 10th point, no longer decides alone, and the noise per point,
    which shrinks on means, no longer widens the band."""
    loss = noisy_stuck_run(seed)
    assert [kinds(loss, constant(), n, means) for n in INTERVALS] == [{"stalled_convergence"}] * len(INTERVALS)


def slowly_learning_run(seed: int, steps: int = 300, noise: float = 0.08) -> np.ndarray:
    """A slow but working run under the same noise: a power law that gains 30% after warm-up."""
    rng = np.random.default_rng(seed)
    k = np.arange(1, steps + 1)
    return np.log(8.0) * k ** -0.15 * np.exp(noise * rng.standard_normal(steps))


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
@pytest.mark.parametrize("seed", range(6))
def test_a_slowly_learning_noisy_run_is_no_stall_at_any_logging_interval(seed, means):
    loss = slowly_learning_run(seed)
    assert [kinds(loss, constant(), n, means) for n in INTERVALS] == [set()] * len(INTERVALS)


def fast_converging_run(seed: int, steps: int = 260) -> np.ndarray:
    """A run that falls 1000x within its first 40 steps and stays there under heavy noise (a
    small classifier that fits its data): logged every 10th step, its first five points span
    the whole fall."""
    rng = np.random.default_rng(seed)
    k = np.arange(steps)
    level = np.maximum(3.3 * np.exp(-k / 5.0), 1e-3)
    return level * np.exp(1.0 * rng.standard_normal(steps))


@pytest.mark.parametrize("seed", range(4))
def test_a_fall_within_the_first_points_is_no_blow_up_at_any_logging_interval(seed):
    """The start level is the lowest of the first points; the points before that lowest one
    did not rise from it."""
    loss, lr = fast_converging_run(seed), warmup_cosine(260)
    assert ["divergence" in kinds(loss, lr, n, means=False) for n in INTERVALS] == [False] * len(INTERVALS)


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
def test_a_stuck_run_logged_every_20th_step_of_200_is_still_judged(means):
    """Ten points: the stuck test's evidence rule judges them; a floor of 16 points declined."""
    loss = noisy_stuck_run(0, steps=200, noise=0.015)
    assert kinds(loss, constant(200), 20, means) == {"stalled_convergence"}
