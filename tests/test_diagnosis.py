"""The likely cause of a finding, read from what the other series did at the same steps."""

from __future__ import annotations

import numpy as np
import pytest

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.analysis.kinds import diagnosers
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

N = 300
STEPS = np.arange(N) * 10
SPIKE = 150


def run_with(grad_spike: bool, scale_drop: bool = False, lr_jump: bool = False, grad_points: int = 6) -> RunSignals:
    rng = np.random.default_rng(0)
    loss = 2 * np.exp(-STEPS / 1000) + 0.3 + rng.normal(0, 0.01, N)
    loss[SPIKE] *= 4
    grad = np.exp(rng.normal(0, 0.2, N))
    if grad_spike:  # from the spike's step on, for `grad_points` logged points
        grad[SPIKE : SPIKE + grad_points] *= 30
    scalars = {"train/loss": loss, "train/grad_norm": grad}
    if scale_drop:
        scale = np.full(N, 2.0**15)
        scale[SPIKE:] = 2.0**13
        scalars["train/loss_scale"] = scale
    lr = np.full(N, 1e-3)
    if lr_jump:
        lr[SPIKE:] = 5e-3
    scalars["train/lr"] = lr
    data = RunData("run", scalars={k: ScalarSeries.from_lists(STEPS, v) for k, v in scalars.items()})
    return RunSignals.from_run(data)


def explain(findings: list[Event], signals: RunSignals) -> list[Event]:
    return diagnosis.explain(findings, signals, diagnosers())


def spike_finding(extra: list[Event] = ()) -> list[Event]:
    step = int(STEPS[SPIKE])
    evidence = {"peak_step": step, "ratio_to_trend": 4.0, "width_points": 1}
    args = {
        "what": Phrase("series.loss"),
        "points": Phrase("loss_spike.points.one"),
        "tail": Phrase("loss_spike.tail.first_batches"),
    }
    return [Event("loss_spike", "warning", step, "train/loss", "loss_spike.jump", evidence, args=args), *extra]


def test_a_one_step_spike_of_loss_and_gradients_that_settles_at_once_is_a_bad_batch():
    explained = explain(spike_finding(), run_with(True, grad_points=1))[0]
    assert explained.evidence["cause"] == "bad_batch"
    assert explained.evidence["related"]["grad_norm_settled_after"] is True


def test_a_bad_batch_whose_loss_stays_raised_for_a_few_windows_is_still_a_bad_batch():
    """The demo's corrupted batch: the loss jumps, stays ~2x up for two more windows (its one
    large update moved the weights), while the gradient norm spiked at one point only."""
    signals = run_with(True, grad_points=1)
    lasting = [Event("loss_spike", "warning", int(STEPS[SPIKE]), "train/loss", "The loss spiked.",
                       end_step=int(STEPS[SPIKE + 2]))]
    assert explain(lasting, signals)[0].evidence["cause"] == "bad_batch"
    assert explain(lasting, run_with(True, grad_points=6))[0].evidence["cause"] == "unstable_update"


@pytest.mark.parametrize(
    "grad_spike, scale_drop, cause",
    [(True, True, "mixed_precision_overflow"), (True, False, "unstable_update"), (False, False, "data")],
)
def test_a_loss_spike_is_explained_by_the_gradient_norm_and_the_loss_scale(grad_spike, scale_drop, cause):
    explained = explain(spike_finding(), run_with(grad_spike, scale_drop))[0]
    assert explained.evidence["cause"] == cause
    message = render_finding(explained, "en")["message"]
    assert "Likely cause:" in message and "try to" in message
    assert explained.evidence["related"]["loss_scale_dropped"] is scale_drop


def test_a_loss_spike_at_a_learning_rate_jump_points_at_the_schedule():
    jump = Event("lr_schedule", "warning", int(STEPS[SPIKE]), "train/lr", "jump", evidence={"what": "jump"})
    explained = explain(spike_finding([jump]), run_with(True, lr_jump=True))
    assert explained[0].evidence["cause"] == "lr_change"


def test_explaining_twice_changes_nothing():
    signals = run_with(True, True)
    once = explain(spike_finding(), signals)
    assert explain(once, signals) == once


def nan_run(grad_first: bool) -> RunData:
    loss = np.linspace(3, 1, N)
    grad = np.ones(N)
    loss[200:] = np.nan
    grad[190 if grad_first else 200 :] = np.inf
    return RunData(
        "run",
        scalars={
            "train/loss": ScalarSeries.from_lists(STEPS, loss),
            "train/grad_norm": ScalarSeries.from_lists(STEPS, grad),
        },
    )


@pytest.mark.parametrize("grad_first, cause", [(True, "backward_overflow"), (False, "forward_nonfinite")])
def test_nan_first_in_the_gradients_versus_first_in_the_loss(grad_first, cause):
    finding = Event("nonfinite", "critical", 2000, "train/loss", "The loss is NaN.")
    explained = explain([finding], RunSignals.from_run(nan_run(grad_first)))[0]
    assert explained.evidence["cause"] == cause
    related = explained.evidence["related"]
    assert related["loss_first_nonfinite_step"] == 2000
    assert related["grad_first_nonfinite_step"] == (1900 if grad_first else 2000)


def test_the_engine_reports_the_cause_once_on_a_real_nonfinite_end_of_a_run():
    # The loss stays NaN to the end: the divergence carries the cause, the loss's non-finite
    # finding points at it instead of repeating it.
    report = analyze_runs([nan_run(grad_first=True)])[0]
    by_kind = {(f["kind"], f["tag"]): f for f in report["findings"]}
    assert by_kind["divergence", "train/loss"]["evidence"]["cause"] == "backward_overflow"
    assert by_kind["nonfinite", "train/grad_norm"]["evidence"]["cause"] == "backward_overflow"
    loss_nonfinite = by_kind["nonfinite", "train/loss"]
    assert loss_nonfinite["evidence"]["part_of"] == "divergence" and "cause" not in loss_nonfinite["evidence"]


def test_a_stall_while_the_learning_rate_is_zero_is_blamed_on_the_schedule():
    lr = np.where(STEPS < 1000, 1e-3, 0.0)
    data = RunData(
        "run",
        scalars={
            "train/loss": ScalarSeries.from_lists(STEPS, np.full(N, 1.0)),
            "train/lr": ScalarSeries.from_lists(STEPS, lr),
        },
    )
    stall = Event("stalled_convergence", "warning", 1500, "train/loss", "Stalled.", end_step=2990)
    explained = explain([stall], RunSignals.from_run(data))[0]
    assert explained.evidence["cause"] == "lr_at_floor"


def test_findings_without_a_related_signal_are_left_as_they_are():
    throughput = Event("throughput", "warning", 10, "train/step_time_ms", "Slower.")
    assert explain([throughput], run_with(False)) == [throughput]


def test_nan_after_exploding_gradients_is_blamed_on_the_explosion():
    signals = RunSignals.from_run(nan_run(grad_first=False))
    exploding = Event("exploding_gradients", "critical", 1800, "train/grad_norm", "Exploded.")
    nonfinite = Event("nonfinite", "critical", 2000, "train/loss", "The loss is NaN.")
    explained = explain([exploding, nonfinite], signals)[1]
    assert explained.evidence["cause"] == "exploding_gradients"
    assert explained.evidence["related"]["exploding_from_step"] == 1800


def creeping_run() -> RunSignals:
    # The loss creeps up 547x over 6,000 steps while the gradient norm grows 4.6e5x.
    steps = np.arange(10, 12010, 10)
    rise = np.clip((steps - 6000) / 6000, 0, None)
    rng = np.random.default_rng(2)
    loss = np.exp(np.log(0.5) + np.log(547) * rise + 0.02 * rng.standard_normal(steps.size))
    grad = np.exp(np.log(4.6e5) * rise + 0.1 * rng.standard_normal(steps.size))
    scalars = {"train/loss": loss, "train/grad_norm": grad, "train/lr": np.full(steps.size, 1e-3)}
    return RunSignals.from_run(RunData("run", scalars={k: ScalarSeries.from_lists(steps, v) for k, v in scalars.items()}))


def test_a_slow_divergence_is_diagnosed_over_its_whole_span_not_at_its_first_step():
    signals = creeping_run()
    divergence = Event("divergence", "critical", 6010, "train/loss", "The loss rises.")
    alone = explain([divergence], signals)[0]
    assert alone.evidence["cause"] == "unstable_update"  # the gradients grew along the rise
    exploding = Event("exploding_gradients", "critical", 7000, "train/grad_norm", "Exploded.")
    with_explosion = explain([divergence, exploding], signals)[0]
    assert with_explosion.evidence["cause"] == "exploding_gradients"


def test_a_divergence_with_normal_gradients_is_not_blamed_on_one_batch():
    signals = creeping_run()
    signals.grad_norm = ScalarSeries.from_lists(signals.loss.steps, np.ones(len(signals.loss)))
    divergence = Event("divergence", "critical", 6010, "train/loss", "The loss rises.")
    assert explain([divergence], signals)[0].evidence.get("cause") != "data"


def exploding_at(step: int, lr: np.ndarray) -> Event:
    signals = RunSignals.from_run(RunData("run", scalars={
        "train/loss": ScalarSeries.from_lists(STEPS, np.full(N, 2.0)),
        "train/lr": ScalarSeries.from_lists(STEPS, lr),
    }))
    exploding = Event("exploding_gradients", "warning", step, "train/grad_norm", "Exploded.", end_step=step + 20)
    return explain([exploding], signals)[0]


def test_gradients_that_blow_up_as_the_warm_up_reaches_its_peak_are_blamed_on_the_peak():
    warm_up = np.minimum(1.0, (STEPS + 10) / 300.0) * 0.1  # the peak at step 290, a tenth of the run
    assert exploding_at(330, warm_up).evidence["cause"] == "lr_peak"
    assert exploding_at(250, np.full(N, 0.1)).evidence["cause"] == "lr_peak"  # constant: at its peak from step 0


def test_a_late_blow_up_under_a_rate_long_at_its_peak_gets_no_peak_cause():
    # like zoo_seen_021: a constant rate of 0.13, a layer's norm up 19,000x at step 370 of 438,
    # once said to have blown up "as the learning rate reached its peak" (reached at step 1)
    late = exploding_at(int(STEPS[int(0.85 * N)]), np.full(N, 0.13))
    assert "cause" not in late.evidence
    warm_up = np.minimum(1.0, (STEPS + 10) / 300.0) * 0.1
    assert "cause" not in exploding_at(int(STEPS[int(0.6 * N)]), warm_up).evidence


def test_a_loss_that_rose_far_with_finite_values_before_turning_inf_blew_up_from_its_updates():
    """zoo_seen3_059, a Transformer at a learning rate of 0.5 logged every step: 2.03 at step 1,
    20.3 at step 2 (the gradient norm 0.69 -> 83), Inf at steps 3-43 with finite gradient norms,
    then finite again and back near its start by step 200. The non-finite finding carries the
    alarm (the finite rise around it is said once, `part_of`), and its cause must not be "the
    forward pass or the inputs": the loss was already ten times its start before any Inf."""
    steps = np.arange(1, 201)
    loss = np.concatenate([[2.03, 20.3], np.full(41, np.inf), 25.0 * np.exp(-np.arange(157) / 30.0) + 2.3])
    grad = np.concatenate([[0.69, 83.2], np.full(41, 25.0), 12.0 * np.exp(-np.arange(157) / 40.0) + 3.0])
    run = RunData("run", scalars={"train/loss": ScalarSeries.from_lists(steps, loss),
                                  "train/grad_norm": ScalarSeries.from_lists(steps, grad)})
    report = analyze_runs([run])[0]
    by_kind = {(f["kind"], f["tag"]): f for f in report["findings"]}
    rise, nonfinite = by_kind["divergence", "train/loss"], by_kind["nonfinite", "train/loss"]
    assert rise["evidence"]["part_of"] == "nonfinite" and rise["step"] == 2
    assert nonfinite["severity"] == "critical" and nonfinite["evidence"]["cause"] == "finite_blow_up"
    assert nonfinite["evidence"]["related"]["rise_onset_step"] == 2
    assert "check that step's inputs" not in nonfinite["message"] and "lower the learning rate" in nonfinite["message"]
    assert "Restart from a checkpoint at or before step 1 " in nonfinite["message"]  # before the rise, not the Inf
