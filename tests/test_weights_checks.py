"""Update ratios, weights that stop changing, drifting norms and saturated weight histograms."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.weights import weights_check
from tb_health_plugin.analysis.detectors.update_ratio import (
    drift,
    large_updates,
    saturation,
    stopped_by_ratio,
)
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import HistogramSeries, RunData, ScalarSeries


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]

N = 200
STEPS = np.arange(N) * 10


def ratios(level=1e-3, seed=0) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0, 0.3, N))


def test_usual_update_ratios_are_quiet_and_huge_ones_are_reported():
    assert large_updates(ratios()) is None
    r = ratios()
    r[120:] = 0.5
    event = large_updates(r)
    assert event is not None and event.step == 120


def test_ratios_of_weights_gone_non_finite_are_the_blow_up_not_large_updates():
    """zoo_dev_010 (SGD at a rate of 3.8): NaN from step 3, then "updates inf of its norm" at every
    weight step, a second finding about the blow-up that the non-finite one already reports."""
    r = ratios()
    r[30:] = np.where(np.arange(N - 30) % 2, np.inf, np.nan)
    assert large_updates(r, STEPS) is None
    r[120:] = 0.5  # finite huge updates between the non-finite ones are still reported
    event = large_updates(r, STEPS)
    assert event is not None and event.step == STEPS[120] and event.evidence["median_update_ratio"] == 0.5


def test_a_weight_that_stops_changing_is_reported_unless_the_rate_went_to_zero():
    r = ratios()
    r[100:] = 0.0
    event = stopped_by_ratio(r)
    assert event is not None and event.step == 100
    lr_share = np.r_[np.ones(100), np.zeros(100)]  # a schedule that decayed to zero: planned
    assert stopped_by_ratio(r, lr_share) is None


def test_a_weight_frozen_from_the_start_is_not_a_stopped_weight():
    assert stopped_by_ratio(np.zeros(N)) is None


def test_a_norm_growing_tenfold_drifts_and_a_modest_change_does_not():
    norm = 5.0 * np.linspace(1, 1.5, N)
    assert drift(norm) is None
    norm[100:] *= np.geomspace(1, 100, 100)
    event = drift(norm)
    assert event is not None and event.evidence["factor"] > 10


def bell(rng, saturate=False) -> np.ndarray:
    values = rng.normal(0, 0.05, 2048)
    if saturate:
        values = np.clip(values * 5, -0.1, 0.1)
    counts, edges = np.histogram(values, bins=30)
    return np.column_stack([edges[:-1], edges[1:], counts.astype(float)])


def test_values_piling_up_at_the_edges_are_saturation():
    from tb_health_plugin.analysis.detectors.histogram_stats import edge_share

    rng = np.random.default_rng(0)
    shares = np.array([edge_share(bell(rng, saturate=i >= 60)) for i in range(100)])
    assert shares[:60].max() < 0.05 and shares[60:].min() > 0.3
    event = saturation(shares)
    assert event is not None and event.step == 60


def test_the_check_groups_parameters_and_respects_the_learning_rate():
    lr = np.where(STEPS < 1500, 1e-3, 0.0)
    scalars = {"train/lr": ScalarSeries.from_lists(STEPS, lr)}
    for i in range(4):
        r = ratios(seed=i)
        r[150:] = 0.0  # every weight stops when the rate reaches zero: planned, not a finding
        scalars[f"update_ratio/layers.{i}.weight"] = ScalarSeries.from_lists(STEPS, r)
        scalars[f"weight_norm/layers.{i}.weight"] = ScalarSeries.from_lists(STEPS, np.full(N, 3.0 + i))
    assert weights_check(RunSignals.from_run(RunData("run", scalars=scalars))) == []
    scalars["train/lr"] = ScalarSeries.from_lists(STEPS, np.full(N, 1e-3))
    findings = weights_check(RunSignals.from_run(RunData("run", scalars=scalars)))
    assert len(findings) == 1
    stopped = findings[0]
    assert stopped.kind == "weight_updates" and stopped.step == 1500
    assert stopped.evidence["parameter_count"] == 4 and "stopped changing" in english(stopped)


def test_saturated_histograms_reach_the_weight_distribution_kind():
    rng = np.random.default_rng(1)
    buckets = [bell(rng, saturate=i >= 30) for i in range(50)]
    hist = HistogramSeries(
        STEPS[:50], np.zeros(50), buckets, np.zeros(50, dtype=np.int64), np.zeros(50, dtype=np.int64)
    )
    findings = weights_check(RunSignals.from_run(RunData("run", histograms={"weight/fc1.weight": hist})))
    assert [(f.kind, f.step, f.tag) for f in findings] == [("weight_distribution", 300, "weight/fc1.weight")]


def test_identical_weight_histograms_mean_the_weight_stopped_changing():
    rng = np.random.default_rng(2)
    buckets = [bell(rng) for _ in range(30)]
    buckets += [buckets[-1].copy() for _ in range(20)]
    hist = HistogramSeries(
        STEPS[:50], np.zeros(50), buckets, np.zeros(50, dtype=np.int64), np.zeros(50, dtype=np.int64)
    )
    findings = weights_check(RunSignals.from_run(RunData("run", histograms={"weight/fc1.weight": hist})))
    assert [(f.kind, f.evidence["what"], f.step) for f in findings] == [("weight_updates", "stopped", 300)]


def _stopping_run(gradients_vanish: bool) -> RunData:
    """Four weights whose updates stop at step 1500 at a constant rate; the global gradient norm
    collapses 1e-9-fold at that step, or stays as it was."""
    rng = np.random.default_rng(3)
    grad = np.exp(rng.normal(0, 0.2, N))
    if gradients_vanish:
        grad[150:] *= 1e-9
    loss = 2.0 * np.exp(-STEPS / 3000) + 0.02 * rng.normal(size=N)
    scalars = {
        "train/lr": ScalarSeries.from_lists(STEPS, np.full(N, 1e-3)),
        "train/loss": ScalarSeries.from_lists(STEPS, loss),
        "train/grad_norm": ScalarSeries.from_lists(STEPS, grad),
    }
    for i in range(4):
        r = ratios(seed=i)
        r[150:] = 0.0
        scalars[f"update_ratio/layers.{i}.weight"] = ScalarSeries.from_lists(STEPS, r)
    return RunData("run", scalars=scalars)


def test_weights_that_stop_because_the_gradients_vanished_are_part_of_that_alarm_not_a_second_one():
    from tb_health_plugin.analysis.engine import analyze_run

    findings = analyze_run(_stopping_run(gradients_vanish=True))["findings"]
    alarms = {f["kind"] for f in findings if f["severity"] != "info"}
    stopped = [f for f in findings if f["kind"] == "weight_updates"]
    assert "vanishing_gradients" in alarms and "weight_updates" not in alarms
    assert len(stopped) == 1 and stopped[0]["evidence"]["part_of"] == "vanishing_gradients"
    assert stopped[0]["evidence"]["parameter_count"] == 4  # the parameters stay listed

    findings = analyze_run(_stopping_run(gradients_vanish=False))["findings"]
    alarms = [f for f in findings if f["severity"] != "info"]
    assert [(f["kind"], f["evidence"]["what"]) for f in alarms] == [("weight_updates", "stopped")]
    assert "part_of" not in alarms[0]["evidence"]
