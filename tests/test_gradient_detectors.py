"""Exploding/vanishing gradients from the global norm, per-layer norms and gradient histograms."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis.checks.gradients import (
    global_norm_check,
    gradient_check,
    layer_depth_check,
    per_layer_check,
)
from tb_health_plugin.analysis.detectors.gradient_norms import exploding, vanishing
from tb_health_plugin.analysis.detectors.layer_depth import depth_imbalance, layer_index, layer_norms
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import HistogramSeries, RunData, ScalarSeries


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]


def noisy_norms(n=300, level=1.0, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level * np.exp(rng.normal(0, 0.3, n))


def test_growth_far_above_the_post_warmup_baseline_is_exploding_from_its_onset():
    g = noisy_norms()
    g[200:] *= np.geomspace(1, 1e6, 100)
    event = exploding(g)
    assert event is not None and event.kind == "exploding_gradients"
    assert 200 <= event.step <= 215
    assert event.severity == "critical"  # a million-fold growth
    assert event.evidence["growth_factor"] > 1e4


def test_large_norms_right_after_initialisation_are_not_exploding():
    g = noisy_norms()
    g[:20] *= np.geomspace(1000, 1, 20)
    assert exploding(g) is None
    assert vanishing(g) is None


def test_an_isolated_spike_or_overflow_is_not_exploding():
    g = noisy_norms()
    g[100] = 1e6
    g[150] = np.inf
    assert exploding(g) is None


def test_norms_overflowing_after_growth_make_it_critical():
    g = noisy_norms()
    g[150:170] *= np.geomspace(1, 1e5, 20)
    g[170:] = np.inf
    event = exploding(g)
    assert event is not None and event.evidence["overflowed"] and event.severity == "critical"


def test_slow_rise_of_a_few_times_is_healthy():
    g = noisy_norms() * np.linspace(1, 5, 300)
    assert exploding(g) is None


def test_collapse_while_the_loss_stays_is_vanishing_but_not_when_the_loss_collapses_too():
    g = noisy_norms()
    g[150:] *= 1e-5
    flat_loss = np.full(300, 2.0)
    event = vanishing(g, flat_loss)
    assert event is not None and event.step == 150 and event.severity == "warning"
    converged_loss = np.r_[np.full(150, 2.0), np.full(150, 2e-5)]
    assert vanishing(g, converged_loss) is None


def test_zero_gradients_are_under_the_absolute_floor():
    g = noisy_norms()
    g[120:] = 0.0
    event = vanishing(g)
    assert event is not None and event.severity == "critical" and event.step == 120
    assert event.evidence["zero_share"] == 1.0


@pytest.mark.parametrize(
    "name, depth",
    [
        ("model.layers.3.attention.wq.weight", 3),
        ("layers.0.weight", 0),
        ("fc2.weight", 2),
        ("transformer.h7.attn.c_attn.weight", 7),
        ("backbone.blocks.11.mlp.fc1.weight", 11),
        ("model.tok_embeddings.embedding_weight", None),
        ("lm_head.weight", None),
        ("encoder.w1", None),
    ],
)
def test_layer_index_is_read_from_parameter_names(name, depth):
    assert layer_index(name) == depth


def depth_series(decades_first_to_last: float, layers=10, n=120, scatter=0.0, seed=0):
    rng = np.random.default_rng(seed)
    steps = np.arange(n) * 10
    profile = np.linspace(decades_first_to_last, 0, layers) + rng.uniform(-scatter, scatter, layers)
    base = noisy_norms(n, seed=seed + 1)
    return {
        f"model.layers.{i}.attention.wq.weight": (steps, base * 10 ** (profile[i] + rng.normal(0, 0.1, n)))
        for i in range(layers)
    } | {"lm_head.weight": (steps, base * 1e3)}


def test_early_layers_far_below_late_ones_are_vanishing():
    depths, steps, norms = layer_norms(depth_series(-7))
    assert depths == list(range(10))
    event = depth_imbalance(norms)
    assert event is not None and event.kind == "vanishing_gradients" and event.step == 0
    assert event.evidence["early_to_late_ratio"] < 1e-3


def test_early_layers_far_above_late_ones_are_exploding():
    event = depth_imbalance(layer_norms(depth_series(6))[2])
    assert event is not None and event.kind == "exploding_gradients"


@pytest.mark.parametrize("decades", [-1.5, 0.0, 1.5])
def test_layers_with_naturally_different_norms_are_healthy(decades):
    event = depth_imbalance(layer_norms(depth_series(decades, scatter=1.2, seed=3))[2])
    assert event is None


def run_signals(scalars=None, histograms=None) -> RunSignals:
    data = RunData(
        "run",
        scalars={k: ScalarSeries.from_lists(*v) for k, v in (scalars or {}).items()},
        histograms=histograms or {},
    )
    return RunSignals.from_run(data)


def test_the_global_check_reports_step_tag_evidence_and_advice():
    steps = np.arange(300) * 5
    g = noisy_norms()
    g[200:] *= np.geomspace(1, 1e5, 100)
    findings = global_norm_check(run_signals({"grad-norm": (steps, g)}))
    assert [f.kind for f in findings] == ["exploding_gradients"]
    f = findings[0]
    assert f.tag == "grad-norm" and 1000 <= f.step <= 1080
    assert "Clip" in english(f) and render_finding(f, "en")["evidence"]["advice"]


def test_mindformers_local_norms_feed_the_depth_check_and_rebuild_the_global_norm():
    series = {"local_norm/" + k: v for k, v in depth_series(-7).items()}
    signals = run_signals(series)
    depth = layer_depth_check(signals)
    assert [f.kind for f in depth] == ["vanishing_gradients"]
    assert depth[0].tag.startswith("local_norm/model.layers.0.")
    assert depth[0].evidence["early_layer_ids"] == [0, 1, 2]
    assert global_norm_check(signals) == []  # the rebuilt global norm is dominated by healthy layers


def histogram(std: float, rng) -> np.ndarray:
    counts, edges = np.histogram(rng.normal(0, std, 512), bins=30)
    return np.column_stack([edges[:-1], edges[1:], counts.astype(float)])


def test_gradient_histograms_alone_are_enough_for_the_depth_check():
    rng = np.random.default_rng(0)
    steps = np.arange(40) * 10
    histograms = {}
    for i in range(8):
        buckets = [histogram(10.0 ** (-(7 - i)), rng) for _ in steps]
        histograms[f"grad/layers.{i}.weight"] = HistogramSeries(
            steps, np.zeros(40), buckets, np.zeros(40, dtype=np.int64), np.zeros(40, dtype=np.int64)
        )
    findings = layer_depth_check(run_signals(histograms=histograms))
    assert [f.kind for f in findings] == ["vanishing_gradients"]
    assert findings[0].tag == "grad/layers.0.weight"


def test_one_layer_dying_is_found_although_the_global_norm_looks_fine():
    rng = np.random.default_rng(0)
    steps = np.arange(300) * 10
    scalars = {f"grad_norm/layers.{i}.weight": (steps, np.exp(rng.normal(0, 0.3, 300))) for i in range(6)}
    dying = scalars["grad_norm/layers.3.weight"][1]
    dying[150:] *= 1e-6
    signals = run_signals(scalars)
    assert global_norm_check(signals) == [] and layer_depth_check(signals) == []
    found = per_layer_check(signals)
    assert [(f.kind, f.step, f.tag) for f in found] == [
        ("vanishing_gradients", 1500, "grad_norm/layers.3.weight")
    ]
    assert found[0].evidence["layers"] == [3]
    assert gradient_check(signals) == found


def test_one_layer_blowing_up_is_found_although_the_global_norm_looks_fine():
    rng = np.random.default_rng(3)
    steps = np.arange(300) * 10
    scalars = {f"grad_norm/layers.{i}.weight": (steps, np.exp(rng.normal(0, 0.3, 300))) for i in range(6)}
    scalars["grad_norm/layers.0.weight"] = (steps, 1e-3 * np.exp(rng.normal(0, 0.3, 300)))
    scalars["grad_norm/layers.0.weight"][1][150:] *= 1e3  # the smallest layer, now 1000x up
    signals = run_signals(scalars)
    assert global_norm_check(signals) == []
    found = per_layer_check(signals)
    assert [(f.kind, f.evidence["layers"]) for f in found] == [("exploding_gradients", [0])]


def test_layers_growing_together_are_no_layer_explosion():
    """A deep net leaving its flat start: every layer's gradient grows by about two decades at
    once, the first layer's most, while the global norm, set by the last layer, moves about 30x.
    Each layer against its own start alone called the first one exploding (zoo_sealed_001 of
    the seed 44444); against the others it grew as they did."""
    rng = np.random.default_rng(4)
    steps = np.arange(240) * 5
    rise = np.clip(steps / 500.0, 0.0, 1.0)  # from step 0 to step 500, then level
    scalars = {}
    for i, (start, decades) in enumerate([(-2.7, 2.6), (-2.6, 2.3), (-2.5, 2.2), (-1.5, 1.5)]):
        scalars[f"grad_norm/layers.{i}.weight"] = (steps, 10.0 ** (start + decades * rise + rng.normal(0, 0.1, 240)))
    assert per_layer_check(run_signals(scalars)) == []
    assert "exploding_gradients" not in [f.kind for f in gradient_check(run_signals(scalars))]


def test_each_kind_is_reported_once_across_the_three_views():
    series = depth_series(-7)
    collapsed = {k: (s, v * np.r_[np.ones(60), np.full(60, 1e-9)]) for k, (s, v) in series.items()}
    kinds = [f.kind for f in gradient_check(run_signals({"grad_norm/" + k: v for k, v in collapsed.items()}))]
    assert kinds.count("vanishing_gradients") == 1


def test_layer_norms_after_a_blow_up_are_not_called_vanishing():
    rng = np.random.default_rng(0)
    steps = np.arange(200) * 10
    loss = np.r_[np.linspace(2, 1, 120), np.full(80, np.nan)]
    scalars = {"train/loss": (steps, loss)}
    global_norm = np.exp(rng.normal(0, 0.3, 200))
    global_norm[100:120] *= np.geomspace(1, 1e6, 20)
    global_norm[120:] = np.nan
    scalars["train/grad_norm"] = (steps, global_norm)
    for i in range(4):
        layer = np.exp(rng.normal(0, 0.3, 200))
        layer[120:] = 0.0  # what MindSpore reports for layers behind NaN weights
        scalars[f"grad_norm/layers.{i}.weight"] = (steps, layer)
    kinds = [f.kind for f in gradient_check(run_signals(scalars))]
    assert kinds == ["exploding_gradients"]


def test_layers_killed_by_a_blow_up_while_the_loss_stays_finite_are_vanishing():
    """zoo_sealed_115 (a 5-layer ReLU MLP under Momentum at 1.1): the norm rose 600x at step 14,
    then every layer but the output bias had a gradient of exactly zero (dead ReLUs) and the loss
    sat at chance, finite, to the end: a run stopped by dead units, not a network of NaN weights.
    (Here the growth is held 30 points, so that the global norm alone shows it.)"""
    rng = np.random.default_rng(1)
    steps = np.arange(200) * 10
    loss = np.r_[np.linspace(2.1, 1.9, 100), 2.08 + 0.02 * rng.standard_normal(100)]
    global_norm = np.exp(rng.normal(0, 0.3, 200))
    global_norm[100:130] *= 1e3  # held long enough to be a growth, not a spike
    global_norm[130:] *= 0.3  # only the output bias still gets a gradient
    scalars = {"train/loss": (steps, loss), "train/grad_norm": (steps, global_norm)}
    for i in range(4):
        layer = np.exp(rng.normal(0, 0.3, 200))
        layer[100:130] *= 1e3
        layer[130:] = 0.0
        scalars[f"grad_norm/layers.{i}.weight"] = (steps, layer)
    found = {f.kind: f for f in gradient_check(run_signals(scalars))}
    assert set(found) == {"exploding_gradients", "vanishing_gradients"}
    assert found["vanishing_gradients"].step >= steps[100]


def test_a_norm_climbing_100x_right_before_it_turns_nonfinite_is_exploding():
    """A float16 run at a far too high rate: from the first step the norm climbs ~0.7 decades a step
    and overflows after 9 logged points, so there is no post-warm-up baseline to compare with."""
    g = np.full(400, np.nan)
    g[:9] = 10.0 ** np.array([0.38, 1.08, 1.43, 1.98, 2.61, 3.29, 3.51, 4.15, 4.86])
    event = exploding(g)
    assert event is not None and event.kind == "exploding_gradients" and event.severity == "critical"
    assert event.step == 2 and event.end_step == 9  # from where it stood clearly above its start
    assert event.evidence["growth_factor"] > 1e3


def test_a_norm_that_turns_nonfinite_without_climbing_is_not_exploding():
    """A NaN straight from a bad batch (or a climb of less than 100x) is the nonfinite check's."""
    g = noisy_norms(seed=3)
    g[150:] = np.nan
    assert exploding(g) is None
    g[140:150] *= 30.0
    assert exploding(g) is None


def test_a_norm_rising_with_the_loss_from_a_converged_low_is_not_exploding():
    """A classifier that reached losses near 1e-7 has norms near 1e-5 there; when its loss then
    climbs by decades (here far above where it started) the norm comes back with it: the norm
    only follows the loss, which the loss's detectors report."""
    rng = np.random.default_rng(5)
    loss_logs = np.concatenate([rng.normal(-1.0, 0.4, 5), rng.normal(-6.5, 0.3, 6), rng.normal(2.5, 1.2, 9)])
    norm_logs = 0.8 * loss_logs + 0.5 + rng.normal(0, 0.2, loss_logs.size)
    assert exploding(10.0**norm_logs, 10.0**loss_logs) is None
    flat_loss = np.full(loss_logs.size, 0.5)  # the same norms while the loss stays: not explained
    assert exploding(10.0**norm_logs, flat_loss) is not None


def test_a_norm_coming_back_towards_where_it_started_is_not_exploding():
    """Zoo runs of two sealed seeds: a norm that started near 0.2, fell to 1e-28 (every unit
    saturated) or 1e-11 and came back by several decades, still far under where it started, was
    a warning "rose 1e22x above its earlier level" while the loss did not move. Growth back
    towards the scale of the untrained network is a recovery or a converged model's hard
    batches; an explosion goes past it (the zoo's rule 3 counts from the start too)."""
    rng = np.random.default_rng(11)
    flat_loss = np.full(60, 2.3)
    start, collapsed, recovered = rng.normal(-0.7, 0.1, 6), rng.normal(-28.0, 0.3, 24), rng.normal(-5.7, 0.3, 30)
    assert exploding(10.0 ** np.concatenate([start, collapsed, recovered]), flat_loss) is None
    beyond = rng.normal(2.0, 0.3, 30)  # the same fall, then 500x above the start: an explosion
    found = exploding(10.0 ** np.concatenate([start, collapsed, beyond]), flat_loss)
    assert found is not None and 10.0 ** start.min() <= found.evidence["baseline_norm"] <= 10.0 ** start.max()


def test_the_checks_let_the_logged_loss_explain_norms_coming_back_from_a_converged_low():
    """The global and the per-layer views both read the run's loss (logged every 10 steps)."""
    rng = np.random.default_rng(7)
    steps = np.arange(1, 21) * 10
    loss_logs = np.concatenate([rng.normal(-1.0, 0.4, 5), rng.normal(-6.5, 0.3, 6), rng.normal(2.5, 1.2, 9)])
    scalars = {"train/loss": (steps, 10.0**loss_logs)}
    for i in range(3):
        scalars[f"grad_norm/{2 * i}.weight"] = (steps, 10.0 ** (0.8 * loss_logs + rng.normal(0, 0.2, 20)))
    assert [f for f in gradient_check(run_signals(scalars)) if f.kind == "exploding_gradients"] == []
    del scalars["train/loss"]
    assert [f.kind for f in gradient_check(run_signals(scalars))].count("exploding_gradients") == 1


def test_layers_with_exactly_zero_gradients_name_float16_underflow_among_the_causes():
    """A float16 sigmoid net: the first layers' gradients underflow to exactly 0 in the backward
    pass (logged as 0.0 after the cast to float32) while the last layer's stay near 0.3."""
    rng = np.random.default_rng(2)
    steps = np.arange(1, 301)
    scalars = {f"grad_norm/{i}.weight": (steps, np.zeros(300)) for i in (0, 2)}
    scalars["grad_norm/4.weight"] = (steps, 0.3 * np.exp(rng.normal(0, 0.3, 300)))
    zero = per_layer_check(run_signals(scalars))
    assert [f.kind for f in zero] == ["vanishing_gradients"] and "underflowed" in english(zero[0])
    scalars["grad_norm/0.weight"] = (steps, 1e-9 * np.exp(rng.normal(0, 0.3, 300)))  # tiny, not zero
    scalars["grad_norm/2.weight"] = (steps, 1e-9 * np.exp(rng.normal(0, 0.3, 300)))
    tiny = per_layer_check(run_signals(scalars))
    assert [f.kind for f in tiny] == ["vanishing_gradients"] and "underflowed" not in english(tiny[0])


# A float16 AdamW MLP of the zoo (zoo_dev_062), logged every 5th step: its loss overflowed to Inf
# at steps 5-15 and 25, where the norm stood at 27-1181; elsewhere mostly at 0.07-1.1 from step 1.
OVERFLOW_NORMS_EVERY_5 = [225.8, 27.25, 1181.0, 0.3795, 174.3, 0.7625, 0.1214, 0.2812, 0.1261, 0.2148,
                          0.1625, 1.130, 0.3819, 10.97, 0.2268, 0.8424, 0.2132, 0.2798, 0.1631, 0.1665,
                          0.1389, 0.07098, 0.3076, 0.1646, 0.1313, 0.1193, 0.1982, 0.1484, 0.1677, 0.08305,
                          0.1085, 0.1515, 0.1314, 0.1463, 0.1245, 0.08342, 0.1519, 0.1177, 0.1758, 0.2589]


def test_norms_of_steps_whose_loss_overflowed_are_no_baseline_for_a_collapse():
    norms = np.array(OVERFLOW_NORMS_EVERY_5)
    steps = 5 * np.arange(1, norms.size + 1)
    loss = np.full(norms.size, 2.1)
    loss[[0, 1, 2, 4]] = np.inf
    assert global_norm_check(run_signals({"train/grad_norm": (steps, norms), "train/loss": (steps, loss)})) == []
    # the same fall from healthy steps' norms is a collapse: 0.5 -> 1e-4 with the loss flat
    collapsed = np.where(np.arange(norms.size) < 12, 0.5, 1e-4)
    collapsed[[0, 1, 2, 4]] = norms[[0, 1, 2, 4]]
    found = global_norm_check(run_signals({"train/grad_norm": (steps, collapsed), "train/loss": (steps, loss)}))
    assert [f.kind for f in found] == ["vanishing_gradients"] and found[0].step == 65
    assert found[0].evidence["baseline_norm"] == pytest.approx(0.5)


def test_a_diverged_run_whose_few_finite_losses_had_zero_norms_did_not_lose_its_gradients():
    """zoo_dev_105 (Momentum at 0.29): Inf loss at most steps after step 48, norms growing 20-400
    there, and a loss and a norm of exactly 0 at the few steps in between."""
    rng = np.random.default_rng(0)
    n = 300
    steps = np.arange(1, n + 1)
    norms = np.geomspace(1.0, 400.0, n) * np.exp(rng.normal(0, 0.3, n))
    loss = np.full(n, np.inf)
    loss[:48] = np.geomspace(2.0, 0.5, 48)
    finite_later = rng.choice(np.arange(48, n), 15, replace=False)
    loss[finite_later], norms[finite_later] = 0.0, 0.0
    kinds = [f.kind for f in global_norm_check(run_signals({"train/grad_norm": (steps, norms), "train/loss": (steps, loss)}))]
    assert "vanishing_gradients" not in kinds


# zoo_sealed_005 as MindFormers-style logs show it (every 10th step): a float16 classifier under
# AdamW whose logits saturate, so at many steps both its loss and its gradient norm are exactly 0.
SATURATED_LOSS = [2.479, np.inf, np.inf, 1.456, 2.068, 5.609, np.inf, 1.288, 0.4583, 0.1959, np.inf, np.inf, 0.0,
                  0.1323, 3.035, 2.992e-05, 0.0, 0.01799, 3.387, 0.0, 0.0, 0.0, 0.07623, 0.2793, 0.0, 0.1245, 0.0,
                  0.0, 0.0, 0.1171, 0.07892, 0.5464, 0.03123, 0.1404, 0.0, 0.0, 0.09448, 1.938, 0.3435, np.inf]
SATURATED_NORM = [1.871, 10.74, 12.79, 6.871, 7.805, 8.059, 12.33, 5.487, 2.288, 6.247, 10.32, 2.358, 0.0, 0.03519,
                  8.038, 0.0005565, 0.0, 3.552, 3.543, 0.0, 0.0, 0.0, 0.05547, 2.18, 0.0, 4.302, 0.0, 0.0, 0.0,
                  0.3884, 0.2254, 3.674, 1.466, 0.1881, 0.0, 0.0, 0.02962, 5.578, 2.414, 1.925]


def test_zero_gradients_of_a_loss_at_zero_are_convergence_not_vanishing():
    """The absolute floor is not vanishing while the loss over it has fit its data (at most 1% of
    its start): the gradient of a loss at its minimum is zero. The same norms under a loss that
    stays near its start (2.1) are."""
    loss, norms = np.array(SATURATED_LOSS), np.array(SATURATED_NORM)
    assert vanishing(norms) is not None  # the norms alone sit at the floor
    assert vanishing(norms, loss) is None
    stuck = np.where(loss == 0.0, 2.1, loss)
    found = vanishing(norms, stuck)
    assert found is not None and found.severity == "critical"
