"""A depth imbalance the run closed by itself is info; one it kept is an alarm; steps whose loss
is NaN or Inf do not make one (zoo_seen25_108, zoo_seen24_040)."""

from __future__ import annotations

import numpy as np

from bench.detection import zoo_labels
from tb_health_plugin.analysis.checks.gradients import gradient_check, layer_depth_check
from tb_health_plugin.analysis.detectors.layer_depth import depth_imbalance
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries


def stack(gap: np.ndarray, layers: int = 6, seed: int = 0) -> np.ndarray:
    """Per-layer norms (layers, points) whose first third stands `gap` decades from the last
    third at each point, 0.1-decade scatter per point."""
    rng = np.random.default_rng(seed)
    depth_share = np.repeat([1.0, 0.5, 0.0], layers // 3)[:, None]
    return 0.4 * 10 ** (gap[None, :] * depth_share + rng.normal(0, 0.1, (layers, gap.size)))


def closing_after(share: float, points: int = 36) -> np.ndarray:
    """zoo_seen25_108's profile (a 6-layer sigmoid MLP under Adam, every 10th of 352 steps):
    3.9 decades apart from the first point, the gap closing to 1.5 decades after `share` of
    the points."""
    t = np.arange(points) / points
    return np.where(t < share, -3.9, -1.5)


def test_a_gap_closed_after_a_quarter_of_the_run_is_info_and_says_so():
    for seed in range(3):
        norms = stack(closing_after(0.25), seed=seed)
        assert not zoo_labels.layer_vanishing(list(norms))
        event = depth_imbalance(norms, np.arange(36) * 10 + 1)
        assert event is not None and event.kind == "vanishing_gradients"
        assert event.severity == "info" and event.advice is None
        assert event.step == 1 and 71 <= event.end_step <= 91
        english = render_finding(event, "en")["message"]
        assert f"to step {event.end_step}" in english and "closed" in english
        assert f"第 {event.end_step} 步" in render_finding(event, "zh")["message"]


def test_a_gap_held_for_most_of_the_run_is_still_an_alarm_though_it_closed():
    norms = stack(closing_after(0.7))
    assert zoo_labels.layer_vanishing(list(norms))
    event = depth_imbalance(norms)
    assert event is not None and event.severity == "warning" and event.message == "gradients.depth.vanishing"


def test_a_gap_that_opens_late_and_lasts_to_the_end_is_an_alarm():
    t = np.arange(60) / 60
    event = depth_imbalance(stack(np.where(t < 0.6, -1.0, -4.0)))
    assert event is not None and event.severity == "warning" and event.advice is not None


def test_steps_with_a_non_finite_loss_do_not_make_an_imbalance():
    """A run whose loss is Inf at most of its steps (a blow-up the non-finite finding reports):
    the layers' norms at those steps read 5 decades apart, at its finite steps 1 decade."""
    n = 120
    steps = np.arange(1, n + 1)
    blown = (steps > 20) & (steps < 90)
    norms = stack(np.where(blown, -5.0, -1.0))
    loss = np.where(blown, np.inf, 2.0)
    scalars = {f"grad_norm/{i}.weight": (steps, norms[i]) for i in range(norms.shape[0])}
    scalars["train/loss"] = (steps, loss)
    signals = RunSignals.from_run(
        RunData("run", scalars={k: ScalarSeries.from_lists(*v) for k, v in scalars.items()})
    )
    assert layer_depth_check(signals) == []
    assert depth_imbalance(norms) is not None  # the same norms, every step counted


def test_an_exploding_gap_the_run_closed_is_info_in_both_languages():
    event = depth_imbalance(stack(-closing_after(0.25)), np.arange(36) * 10 + 1)
    assert event is not None and event.kind == "exploding_gradients" and event.severity == "info"
    assert event.message == "gradients.depth.exploding.closed"
    assert f"to step {event.end_step}" in render_finding(event, "en")["message"]
    assert f"第 {event.end_step} 步" in render_finding(event, "zh")["message"]


def test_a_closed_gap_hides_no_later_alarm_of_its_kind():
    """The closed gap's info comes from the depth check, which runs before the per-layer one;
    a layer that dies after the gap closed is still a vanishing-gradients alarm."""
    points = 120
    steps = np.arange(1, points + 1) * 10
    norms = stack(closing_after(0.25, points), seed=1)
    norms[2, 90:] = 0.0  # a middle layer (outside both thirds) receives nothing from step 910
    scalars = {f"grad_norm/{i}.weight": (steps, norms[i]) for i in range(norms.shape[0])}
    scalars["train/loss"] = (steps, np.geomspace(2.0, 1.0, points))
    signals = RunSignals.from_run(
        RunData("run", scalars={k: ScalarSeries.from_lists(*v) for k, v in scalars.items()})
    )
    found = [(f.kind, f.severity) for f in gradient_check(signals)]
    assert ("vanishing_gradients", "info") in found
    assert any(kind == "vanishing_gradients" and severity != "info" for kind, severity in found)
