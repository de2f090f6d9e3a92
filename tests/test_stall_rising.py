"""A run that learned nothing while its loss crept up is stalled, not healthy; a noisy learner
whose few logged points only suggest a rise is not."""

from __future__ import annotations

import numpy as np
import pytest

from bench.detection import zoo_labels
from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.render import render_finding
from tests.logged_runs import kinds, logged

STEPS = 320
INTERVALS = (1, 5, 10)


def creeping_at_chance(seed: int, rise: float = 0.07, noise: float = 0.05) -> np.ndarray:
    """An 8-class classifier at chance whose loss creeps up by `rise` over the run, with
    log-normal minibatch noise (zoo_seen15_004: a ReLU net whose layers died, 2.08 at step 1,
    2.2-2.5 at the end; zoo_dev_089: +9% over its run at a constant rate)."""
    rng = np.random.default_rng(seed)
    level = np.log(8.0) * np.exp(np.log1p(rise) * np.linspace(0.0, 1.0, STEPS))
    return level * np.exp(noise * rng.standard_normal(STEPS))


def slow_noisy_learner(seed: int, gain: float = 0.19, noise: float = 0.35) -> np.ndarray:
    """A float16 sigmoid net under a high rate that gains 19% over its run in a very noisy loss
    (zoo_seen15_119: -19% at every step, +12% +-13% on its points logged every 5th step)."""
    rng = np.random.default_rng(seed)
    level = np.log(8.0) * np.exp(np.log1p(-gain) * np.linspace(0.0, 1.0, STEPS))
    return level * np.exp(noise * rng.standard_normal(STEPS))


@pytest.mark.parametrize("means", [False, True], ids=["points", "means"])
@pytest.mark.parametrize("seed", range(4))
def test_a_loss_creeping_up_at_chance_level_is_a_stall_at_every_interval(seed, means):
    """Once asked to change by less than +-5%, such a run was neither stalled nor diverging, and
    nothing was reported; the zoo's rule 5 labelled it healthy."""
    loss, lr = creeping_at_chance(seed), np.full(STEPS, 0.3)
    assert zoo_labels.stalled_run(loss, lr) and not zoo_labels.stall_undetermined(loss, lr)
    assert [kinds(loss, lr, n, means) for n in INTERVALS] == [{"stalled_convergence"}] * len(INTERVALS)


def test_a_noisy_learner_is_not_called_stalled_on_a_rise_its_points_only_suggest():
    """The rule asks the change to be measured to within a quarter either way: an estimate of a
    rise with an error of +-13% says nothing about whether the run learned."""
    lr = np.full(STEPS, 1.3)
    found = []
    for seed in range(30):
        loss = slow_noisy_learner(seed)
        assert not zoo_labels.stalled_run(loss, lr)
        found += [kinds(loss, lr, n, means) for n in (5, 10) for means in (False, True)]
    assert all("stalled_convergence" not in k for k in found)


def test_a_stall_whose_loss_rose_says_so_and_points_at_the_rate_being_too_high():
    loss, lr = creeping_at_chance(0, rise=0.12), np.full(STEPS, 0.3)
    (stall,) = [f for f in check_loss_curve(logged(loss, lr, 1, False)) if f.kind == "stalled_convergence"]
    assert stall.message == "stalled.from_start.rising"
    english = render_finding(stall, "en")["message"]
    assert f"rose {np.expm1(stall.evidence['change_log']):.0%}" in english and "too high" in english
    assert "上升了" in render_finding(stall, "zh")["message"]
    flat = creeping_at_chance(0, rise=0.0)
    (stall,) = [f for f in check_loss_curve(logged(flat, lr, 1, False)) if f.kind == "stalled_convergence"]
    assert stall.message == "stalled.from_start"
