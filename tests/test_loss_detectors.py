"""The loss detectors on curves with known faults, and on benign traps that must stay quiet."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_spike_null import converged_classifier
from tb_health_plugin.analysis.checks.loss import check_nonfinite
from tb_health_plugin.analysis.detectors.divergence import loss_divergence
from tb_health_plugin.analysis.detectors.nonfinite import nonfinite_values
from tb_health_plugin.analysis.detectors.overfitting import overfitting
from tb_health_plugin.analysis.detectors.robust import fit_noise_tail, log_loss, rolling_median
from tb_health_plugin.analysis.detectors.schedule import infer_schedule
from tb_health_plugin.analysis.detectors.spikes import loss_spikes
from tb_health_plugin.analysis.detectors.stall import stalled_convergence
from tb_health_plugin.analysis.diagnosis import loss_spike_cause
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]

ALARMS = ("warning", "critical")


def curve(points: int, interval: int = 10, seed: int = 0, noise: float = 0.03, nu: float | None = None):
    """A power-law loss logged every `interval` steps, with log-normal or log-t noise."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points) * interval + interval
    y = np.log(0.5 + 4.0 * (1 + steps / (points * interval * 0.02)) ** -0.7)
    e = rng.standard_t(nu, points) if nu else rng.standard_normal(points)
    return steps, y + noise * e


def alarms(findings):
    return [f for f in findings if f.severity in ALARMS]


def test_log_loss_handles_zero_and_negative_losses_keeping_order():
    values = np.array([-3.0, -1.0, 0.0, 2.0, np.nan])
    y = log_loss(values)
    assert np.all(np.isfinite(y[:4])) and np.isnan(y[4])
    assert np.all(np.diff(y[:4]) > 0)


def test_rolling_median_keeps_a_straight_line_straight_at_both_ends():
    y = np.linspace(5.0, 1.0, 200)
    assert np.allclose(rolling_median(y, 17, edges="trend"), y)


@pytest.mark.parametrize("nu, lightest, heaviest", [(3.0, 2.0, 5.0), (None, 20.0, np.inf)])
def test_noise_tail_fit_tells_heavy_from_gaussian_noise(nu, lightest, heaviest):
    rng = np.random.default_rng(1)
    e = rng.standard_t(nu, 4000) if nu else rng.standard_normal(4000)
    r = e - rolling_median(e, 17, edges="trend")
    fitted = fit_noise_tail(r / np.median(np.abs(r))).nu
    assert lightest <= fitted <= heaviest


def test_a_spike_is_found_at_its_step_with_the_last_healthy_step_as_advice():
    steps, y = curve(1500)
    y[900:903] += np.log(3.0) * np.array([1.0, 0.6, 0.3])
    found = alarms(loss_spikes(steps, np.exp(y), "train/loss", infer_schedule(steps)))
    assert [f.step for f in found] == [int(steps[900])]
    assert found[0].evidence["last_healthy_step"] == int(steps[899])
    assert str(int(steps[899])) in english(found[0])


@pytest.mark.parametrize("seed", range(4))
def test_a_two_step_bad_batch_in_a_very_noisy_per_step_log_is_a_spike(seed):
    # As in the real MindSpore corrupted-batch runs: per-step losses that scatter over a factor
    # of ten, and two consecutive steps 35x above the trend.
    steps, y = curve(400, interval=1, seed=seed, noise=0.45, nu=6.0)
    y[250:252] += np.log(35.0)
    found = alarms(loss_spikes(steps, np.exp(y), "loss", infer_schedule(steps)))
    assert int(steps[250]) in [f.step for f in found]


def classifier_run(seed: int, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """`bench_spike_null.converged_classifier`: a converged classifier's loss with hard batches."""
    return converged_classifier(points, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", [2, 9])
def test_hard_batches_of_a_converged_classifier_are_not_gross_spikes(seed):
    # Hard batches 10-40x above the trend (a "gross" ratio), yet 0.05-0.3 against a start of
    # 2.1, and as common as the heavy tail of the noise says (seeds where such a batch stands
    # out most: the rule on the ratio alone called them spikes).
    steps, values = classifier_run(seed)
    trend = 0.003 + 2.1 * (1 + steps / 8.0) ** -1.6
    assert np.any(values[150:] > 10 * trend[150:])  # the trap is real
    assert alarms(loss_spikes(steps, values, "loss", infer_schedule(steps))) == []


def test_a_corrupted_batch_in_a_converged_classifier_is_still_a_spike():
    steps, values = classifier_run(2)
    values[300:302] += 3 * 2.1  # two steps of a corrupted batch: three times the starting loss
    found = alarms(loss_spikes(steps, values, "loss", infer_schedule(steps)))
    assert [f.step for f in found] == [int(steps[300])]


@pytest.mark.parametrize("seed", range(3))
def test_finite_values_beside_an_overflow_are_not_spikes(seed):
    # A float16 loss overflows to inf at three steps; the step after each reads 8x the trend.
    # The non-finite check reports those events; the odd values beside them are no spikes.
    steps, y = curve(400, interval=1, seed=seed, noise=0.1)
    values = np.exp(y)
    for step in (150, 230, 310):
        values[step] = np.inf
        values[step + 1] *= 8.0
    assert alarms(loss_spikes(steps, values, "loss", infer_schedule(steps))) == []
    assert [f.step for f in nonfinite_values(steps, values, "loss", "training_loss")] != []
    for step in (150, 230, 310):
        values[step] = values[step - 1]  # the same jumps without the overflow: spikes
    found = alarms(loss_spikes(steps, values, "loss", infer_schedule(steps)))
    assert {int(steps[s + 1]) for s in (150, 230, 310)} <= {f.step for f in found}


@pytest.mark.parametrize("seed", range(6))
def test_heavy_tailed_noise_alone_raises_no_spike(seed):
    steps, y = curve(3000, seed=seed, noise=0.04, nu=4.0)
    assert alarms(loss_spikes(steps, np.exp(y), "loss", infer_schedule(steps))) == []


def test_learning_rate_step_drops_are_not_spikes_or_divergence():
    steps, y = curve(2000, seed=3)
    y[1000:] -= 0.4  # a 10x learning-rate decay drops the loss at once
    y[1500:] -= 0.2
    schedule = infer_schedule(steps)
    assert alarms(loss_spikes(steps, np.exp(y), "loss", schedule)) == []
    assert loss_divergence(steps, np.exp(y), "loss", schedule) == []


def test_warmup_bumps_are_info_at_most():
    steps, y = curve(1000, seed=4)
    lr = np.minimum(1.0, steps / steps[150]) * 1e-3
    y[40:60] += 0.5 * np.sin(np.linspace(0, np.pi, 20))
    schedule = infer_schedule(steps, steps, lr)
    assert alarms(loss_spikes(steps, np.exp(y), "loss", schedule)) == []
    assert loss_divergence(steps, np.exp(y), "loss", schedule) == []


def test_a_blow_up_during_warm_up_that_never_comes_back_is_a_critical_divergence():
    # As the demo's learning rate far too high: the loss explodes within warm-up, then falls
    # from its peak but ends 200x above the untrained model's loss.
    steps, y = curve(600, interval=5, seed=5)
    lr = np.minimum(1.0, steps / steps[60]) * 0.3
    y[2:] += np.minimum(np.log(2e5), 1.5 * np.arange(598)) - np.log(1e3) * np.minimum(1.0, np.arange(598) / 200)
    schedule = infer_schedule(steps, steps, lr)
    found = loss_divergence(steps, np.exp(y), "loss", schedule)
    assert [(f.kind, f.severity) for f in found] == [("divergence", "critical")]
    assert found[0].step <= steps[3]
    assert found[0].evidence["ratio_end_to_start"] > 10
    assert "worse than at initialisation" in english(found[0])  # 39x above its first points


def test_one_step_spike_between_logged_points_is_visible_in_the_window_maximum():
    rng = np.random.default_rng(5)
    per_step = np.exp(np.log(2.0) + 0.03 * rng.standard_normal(20000))
    per_step[12345] *= 6.0
    windows = per_step.reshape(-1, 10)
    steps = np.arange(10, 20001, 10) - 1
    schedule = infer_schedule(steps)
    assert alarms(loss_spikes(steps, windows[:, -1], "train/loss", schedule)) == []
    found = alarms(loss_spikes(steps, windows.max(axis=1), "train/loss_max", schedule))
    assert [f.step for f in found] == [12349]


# zoo_holdout_013's logged loss (a GELU MLP under Adam, every 5th step from step 5, step 1 first):
# 2.07 down to 1e-7-3e-4, then 0.0005-0.017 after a corrupted batch at step 228.
CONVERGED_THEN_MOVED = np.array([
    2.07, 2.05, 2.01, 1.9, 1.58, 0.808, 0.296, 0.00442, 0.000151, 7.39e-06, 4.91e-06, 1.17e-05, 0.111,
    0.000152, 0.00133, 0.00158, 6.11e-05, 1.56e-07, 1.54e-05, 0.000253, 1.61e-05, 2.18e-07, 0.000322,
    7.58e-07, 4.85e-05, 9.43e-06, 9.68e-05, 5.56e-06, 2.79e-07, 3.41e-07, 9.56e-07, 9.13e-07, 0.000201,
    7.88e-07, 8.88e-07, 0.00195, 6.26e-06, 0.000176, 1.89e-05, 4.04e-06, 9.7e-07, 1.7e-07, 8.68e-07,
    4.21e-07, 1.58e-07, 9.7e-07, 1.43e-06, 2.32e-05, 0.000505, 0.000964, 0.0173, 0.00159, 0.00192,
    0.00972, 0.00295, 0.00168, 0.00149, 0.00263, 0.00717, 0.00108, 0.00909, 0.00338, 0.00316, 0.000998,
    0.00134, 0.000564, 0.00159, 0.00215, 0.000782, 0.00147, 0.00107, 0.000647, 0.00418, 0.00101,
    0.00075, 0.00092, 0.000757, 0.000614, 0.000892, 0.00256, 0.00136, 0.000504, 0.000624,
])


@pytest.mark.parametrize("floor, severity", [(0.006, "info"), (0.5, "warning")])
def test_a_spike_whose_peak_stays_in_the_converged_regime_is_info(floor, severity):
    # A classifier from about 1.5 down to `floor`, its logged means steady to 1%, lifted 1.35x for
    # three points: significant either way; at 0.006 the peak (0.008) is under 1% of the start
    # (zoo_seen3_122), at 0.5 it is a quarter of it.
    steps = np.arange(1, 601)
    values = np.exp(np.log(floor + (2.09 - floor) * (1 + steps / 8.0) ** -1.6)
                    + 0.01 * np.random.default_rng(0).standard_normal(steps.size))
    values[400:403] *= 1.35
    found = loss_spikes(steps, values, "loss", infer_schedule(steps))
    assert [(f.step, f.severity) for f in found] == [(401, severity)]
    assert found[0].evidence["start_loss"] == pytest.approx(np.median(values[:3]))  # stall.start_level
    assert ("at most 1% of the loss the run started from" in english(found[0])) == (severity == "info")
    if severity == "info":  # harmless: no likely cause to chase, no advice
        assert loss_spike_cause(found[0], found, RunSignals.from_run(RunData("r"))) == (None, {})


def test_a_rise_that_stays_under_a_hundredth_of_the_start_is_no_divergence():
    steps = np.r_[1, np.arange(5, 411, 5)]
    found = loss_divergence(steps, CONVERGED_THEN_MOVED, "loss", infer_schedule(steps))
    assert [f.kind for f in found] == []
    lost_it = CONVERGED_THEN_MOVED.copy()
    lost_it[steps >= 245] *= 30  # 0.015-0.5, up to a quarter of where it started: no longer converged
    found = loss_divergence(steps, lost_it, "loss", infer_schedule(steps))
    assert "divergence" in [f.kind for f in found]


@pytest.mark.parametrize("interval", [1, 10, 100])
def test_divergence_onset_is_reported_within_three_logged_points(interval):
    steps, y = curve(800, interval=interval, seed=6)
    onset = 500
    y[onset:] += np.expm1(0.3 * np.arange(300)).clip(max=8.0)
    found = loss_divergence(steps, np.exp(y), "loss", infer_schedule(steps))
    assert [f.severity for f in found] == ["critical"]
    assert abs(found[0].step - steps[onset]) <= 3 * interval


@pytest.mark.parametrize("seed", range(4))
def test_a_blow_up_held_above_twice_the_start_is_found_when_the_converged_end_is_noisy(seed):
    """zoo_seen9_123's shape: a quiet start at 2.08 falling to 0.3, a blow-up to a median of 9
    for 130 of 2,600 steps (warm-up at a rate of 1.3), then a converged loss near zero whose
    log-scale noise (sd 1.2) made the run's per-point sigma, and step 7's 6-sigma margin, so
    wide (1,300x) that nothing was reported. Judged as a held level against the start's (the
    median of the first points), it is a divergence; the same run without the blow-up has none."""
    rng = np.random.default_rng(600 + seed)
    steps = np.arange(1, 2601)
    y = np.maximum(np.log(2.08) - np.clip(steps - 10, 0, None) / 15.0, np.log(0.3))
    y += 0.02 * rng.standard_normal(steps.size)
    tail = steps > 300
    y[tail] = np.log(0.3) - (steps[tail] - 300) / 300.0 + 1.2 * rng.standard_normal(tail.sum())
    assert loss_divergence(steps, np.exp(y), "loss", infer_schedule(steps)) == []
    y[40:170] = np.log(9.0) + 0.4 * rng.standard_normal(130)
    found = loss_divergence(steps, np.exp(y), "loss", infer_schedule(steps))
    assert [(f.kind, f.severity) for f in found] == [("divergence", "warning")]
    assert abs(found[0].step - 41) <= 2 and found[0].message == "divergence.far_above.learned_after"
    assert "it came back and ends at" in english(found[0])


def test_a_run_ending_in_nan_diverged_and_is_nonfinite():
    steps, y = curve(600, seed=7)
    values = np.exp(y)
    values[450:] = np.nan
    assert [f.kind for f in loss_divergence(steps, values, "loss", infer_schedule(steps))] == ["divergence"]
    found = nonfinite_values(steps, values, "loss", "training_loss", always_critical=True)
    assert found[0].step == steps[450] and found[0].severity == "critical"
    assert str(int(steps[449])) in english(found[0])


def test_a_series_finite_again_between_its_non_finite_points_does_not_stay_non_finite_from_the_first():
    """zoo_seen9_118's gradient-free shape: interval means of 20 steps, an overflowed step now
    and then making a mean Inf (steps 20-60, 140, and the last point, 220), the loss at 2.1 in
    between. "Becomes inf at step 20 and stays non-finite to the end" was false; the finding
    says how many points, and from where the non-finite end runs."""
    steps = np.arange(20, 221, 20)
    values = np.array([np.inf, np.inf, np.inf, 2.138, 2.13, 2.163, np.inf, 2.087, 2.084, 2.081, np.inf])
    found = nonfinite_values(steps, values, "train/grad_norm", "gradient_norm")
    text = english(found[0])
    assert "stays non-finite to the end" not in text
    assert "at 5 logged point(s), and from step 220 to the end" in text
    assert found[0].severity == "critical" and found[0].evidence["nonfinite_to_end_from_step"] == 220
    one_stretch = nonfinite_values(steps, np.where(steps >= 140, np.inf, 2.1), "loss", "gradient_norm")
    assert "becomes inf at step 140 and stays non-finite to the end" in english(one_stretch[0])


def test_the_end_of_a_divergence_after_earlier_non_finite_points_names_both_steps():
    steps = np.arange(20, 221, 20)
    values = np.array([np.inf, np.inf, np.inf, 2.138, 2.13, 2.163, np.inf, 2.087, 2.084, 2.081, np.inf])
    run = RunData("hf", {"train/loss": ScalarSeries.from_lists(steps, values)})
    loss = [f for f in check_nonfinite(RunSignals.from_run(run)) if f.tag == "train/loss"]
    assert loss[0].evidence["part_of"] == "divergence"
    text = english(loss[0])
    assert "stays non-finite to the end" not in text
    assert "inf at 5 logged point(s) from step 20, and from step 220 to the end" in text
    assert "从第 220 步起直到结束" in render_finding(loss[0], "zh")["message"]


def test_a_loss_bad_at_the_first_logged_point_is_never_finite_only_when_it_stays_bad():
    """zoo_dev_103's shape, logged every 10 steps: the untrained loss (2.1) blew up to Inf
    before step 10, the first logged point, and came back finite at step 30 (31, then down to
    1.8). "It was never finite" would send the user to the inputs and the initialisation; the
    advice is about the first updates. A loss Inf at every point was never finite."""
    steps = np.arange(10, 4301, 10)
    values = np.concatenate([[np.inf, np.inf], 31.0 * np.exp(-np.arange(steps.size - 2) / 40.0) + 1.8])
    found = nonfinite_values(steps, values, "loss", "training_loss", always_critical=True)
    text = english(found[0])
    assert found[0].step == 10 and "never finite" not in text and "first logged point and finite later" in text
    never = nonfinite_values(steps, np.full(steps.size, np.inf), "loss", "training_loss", always_critical=True)
    assert "It was never finite" in english(never[0])


def test_a_plateau_at_a_high_learning_rate_is_a_stall():
    steps, y = curve(1200, seed=8)
    y[500:] = y[500] + 0.03 * np.random.default_rng(8).standard_normal(700)
    lr = np.full(steps.size, 1e-3)
    found = stalled_convergence(steps, np.exp(y), "loss", infer_schedule(steps, steps, lr))
    assert [f.kind for f in found] == ["stalled_convergence"]
    assert steps[350] <= found[0].step <= steps[560]


def test_the_flattening_of_a_planned_anneal_is_not_a_stall():
    steps, y = curve(1200, seed=9)
    y[500:] = y[500] + 0.03 * np.random.default_rng(9).standard_normal(700)
    lr = 1e-3 * 0.5 * (1 + np.cos(np.pi * np.clip((steps - steps[100]) / (steps[450] - steps[100]), 0, 1)))
    assert stalled_convergence(steps, np.exp(y), "loss", infer_schedule(steps, steps, lr)) == []


def test_a_run_stuck_from_the_start_is_a_stall_at_its_first_points():
    rng = np.random.default_rng(10)
    steps = np.arange(1, 401)
    values = np.exp(np.log(2.3) + 0.02 * rng.standard_normal(400))
    found = stalled_convergence(steps, values, "loss", infer_schedule(steps))
    assert found and found[0].evidence["stuck_from_start"]


def test_warm_up_without_a_logged_rate_is_the_same_share_of_the_steps_however_densely_logged():
    every_step = infer_schedule(np.arange(1, 344)).warmup_end_step
    assert every_step == 35  # a tenth of 343 steps
    for interval in (5, 10, 20):  # a point sums up the `interval` steps before it
        steps = np.arange(interval, 344, interval)
        assert infer_schedule(steps).warmup_end_step - every_step < interval
    assert infer_schedule(np.arange(20, 344, 20) + 100_000).warmup_end_step == infer_schedule(np.arange(20, 344, 20)).warmup_end_step + 100_000


def test_a_run_stuck_at_chance_logged_every_20th_step_before_a_step_decay_is_a_stall():
    """zoo_sealed_045 (AdamW, step decay at a third of 343 steps, means of 20 steps): a tenth of
    17 points rounded up made the warm-up 40 steps long, and left 3 points at the high rate, too
    few to judge; every step logged, the same run was stalled."""
    rng = np.random.default_rng(12)
    per_step = 2.08 + 0.03 * rng.standard_normal(343)
    per_step[:15] += np.linspace(0.6, 0.0, 15)
    lr_per_step = np.where(np.arange(1, 344) < 113, 0.012, 0.0012)
    verdicts = []
    for interval in (1, 20):
        steps = np.arange(interval, 344, interval)
        means = per_step[: steps.size * interval].reshape(-1, interval).mean(axis=1)
        schedule = infer_schedule(steps, steps, lr_per_step[steps - 1])
        verdicts.append([f.kind for f in stalled_convergence(steps, means, "loss", schedule)])
    assert verdicts == [["stalled_convergence"], ["stalled_convergence"]]


@pytest.mark.parametrize("seed", range(4))
def test_a_healthy_improving_run_is_neither_stalled_nor_diverging(seed):
    steps, y = curve(2500, seed=seed, noise=0.05)
    schedule = infer_schedule(steps)
    assert stalled_convergence(steps, np.exp(y), "loss", schedule) == []
    assert loss_divergence(steps, np.exp(y), "loss", schedule) == []


def test_overfitting_when_eval_rises_while_train_falls_and_not_otherwise():
    steps, y = curve(1000, seed=11, noise=0.005)
    eval_steps = steps[99::100]
    eval_y = np.interp(eval_steps, steps, y) + 0.1
    rising = eval_y.copy()
    rising[6:] = eval_y[5] + np.linspace(0.05, 0.4, 4)  # the best evaluation is the 6th
    found = overfitting(eval_steps, np.exp(rising), steps, np.exp(y), "eval/loss")
    assert [f.step for f in found] == [int(eval_steps[5])]
    assert overfitting(eval_steps, np.exp(eval_y), steps, np.exp(y), "eval/loss") == []


def test_a_first_window_that_averages_a_blow_up_is_judged_from_its_minimum():
    # Case of a custom loop at a far too high rate: the first logged mean is already 1.6e10
    # (the window's minimum, the loss of step 1, is 31.6); the loss falls to 56,340 and ends
    # there, 1800x above the start but far below the first logged mean.
    steps = np.arange(10, 3010, 10)
    rng = np.random.default_rng(3)
    y = np.log(56340.0) + np.log(1.6e10 / 56340.0) * np.exp(-np.arange(steps.size) / 20) + 0.05 * rng.standard_normal(steps.size)
    window_min = np.exp(y - 0.3)
    window_min[0] = 31.6
    schedule = infer_schedule(steps)
    assert alarms(loss_divergence(steps, np.exp(y), "train/loss", schedule)) == []  # the means alone hide it
    found = alarms(loss_divergence(steps, np.exp(y), "train/loss", schedule, window_min=window_min))
    assert [(f.kind, f.severity) for f in found] == [("divergence", "critical")]
    assert found[0].evidence["start_loss"] == pytest.approx(31.6)
    assert 1000 < found[0].evidence["ratio_end_to_start"] < 3000


def test_a_healthy_noisy_run_is_not_called_diverged_by_its_window_minima():
    # Window minima sit well below the window means; start and end are compared like with like.
    steps, y = curve(600, seed=11, noise=0.02)
    window_min = np.exp(y - 1.2)  # minima of very noisy 10-step windows: 0.3x the mean
    found = loss_divergence(steps, np.exp(y), "train/loss", infer_schedule(steps), window_min=window_min)
    assert alarms(found) == []


def test_an_excursion_of_eight_orders_of_magnitude_is_critical_though_it_comes_back():
    # SummaryCollector at a far too high rate: 42.5 at step 1, 4e9 at step 15, 2e10 at step 75,
    # above 1e4 until about step 230, back near 43 by the end of 300 steps.
    steps = np.arange(1, 301)
    rng = np.random.default_rng(4)
    log_path = np.interp(steps, [1, 2, 15, 75, 230, 270, 300],
                         np.log([42.5, 1e6, 4e9, 2e10, 1e4, 45.0, 43.0]))
    values = np.exp(log_path + 0.1 * rng.standard_normal(steps.size))
    values[0] = 42.5
    found = alarms(loss_divergence(steps, values, "loss/auto", infer_schedule(steps)))
    assert [(f.kind, f.severity) for f in found] == [("divergence", "critical")]
    assert found[0].step <= 3 and found[0].evidence["ratio_peak_to_start"] > 1e8
    assert "no recovery" in english(found[0])


def test_a_loss_nan_from_its_first_logged_point_after_a_finite_start_blew_up_there():
    steps = np.arange(10, 310, 10)
    values = np.full(steps.size, np.nan)
    schedule = infer_schedule(steps)
    never = loss_divergence(steps, values, "train/loss", schedule)
    assert "check the inputs" in english(never[0])
    window_min = np.full(steps.size, np.nan)
    window_min[0] = 140.7
    started = loss_divergence(steps, values, "train/loss", schedule, window_min=window_min)
    assert [(f.kind, f.severity, f.step) for f in started] == [("divergence", "critical", 10)]
    assert "started finite (140.7" in english(started[0]) and "learning rate" in english(started[0])
    assert "inputs" not in english(started[0])
    with_first_point = values.copy()
    with_first_point[0] = 140.7  # a logger that logs step 1 itself, or SummaryCollector
    assert "started finite" in english(loss_divergence(steps, with_first_point, "train/loss", schedule)[0])


def test_the_stall_verdict_does_not_depend_on_where_step_numbering_starts():
    steps, y = curve(600, seed=12)
    for offset in (0, 100_000, 10_000_000):
        shifted = steps + offset
        assert alarms(stalled_convergence(shifted, np.exp(y), "loss", infer_schedule(shifted))) == [], offset
    stalled = y.copy()
    stalled[250:] = stalled[250]
    found = [stalled_convergence(steps + offset, np.exp(stalled), "loss", infer_schedule(steps + offset))
             for offset in (0, 100_000)]
    assert [f.step - offset for fs, offset in zip(found, (0, 100_000), strict=True) for f in fs] == [found[0][0].step] * 2


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_a_slow_creep_is_dated_from_where_its_rise_began_not_where_it_outgrew_the_noise(seed):
    # The loss turns at 60% of the run and creeps up 50% by its end, in noise of 5% per point.
    steps, y = curve(2000, seed=seed, noise=0.05)
    onset = 1200
    y[onset:] += np.log(1.5) * np.arange(800) / 800
    found = alarms(loss_divergence(steps, np.exp(y), "loss", infer_schedule(steps)))
    assert [f.kind for f in found] == ["divergence"]
    assert abs(found[0].step - steps[onset]) <= 0.10 * (steps[-1] - steps[0])  # the ONSET_Z rule alone: 16-21%


# zoo_dev_072 logged every 5th step (Momentum, step decay): a monotone descent, then a converged
# classifier's batch noise of 0.09-0.21 around a best level of 0.12.
CONVERGED_NOISY_EVERY_5 = [2.092, 2.084, 1.998, 1.947, 1.874, 1.722, 1.599, 1.293, 1.147, 0.957, 0.781, 0.609,
                           0.477, 0.329, 0.276, 0.215, 0.26, 0.256, 0.237, 0.26, 0.124, 0.204, 0.129, 0.119,
                           0.119, 0.117, 0.14, 0.167, 0.144, 0.204, 0.124, 0.146, 0.183, 0.174, 0.144, 0.109,
                           0.092, 0.154, 0.112, 0.206, 0.093, 0.1]


def test_batch_noise_of_a_converged_tail_is_judged_against_its_own_noise_not_the_descents():
    """The descent's residuals around a running median are exactly 0: the run's MAD (0.019)
    made the tail's noise a 6-sigma rise; its every-step log (MAD 0.115) showed none."""
    values = np.array(CONVERGED_NOISY_EVERY_5)
    steps = 5 * np.arange(1, values.size + 1)
    lr = np.r_[np.full(25, 0.017), np.full(6, 0.0017), np.full(values.size - 31, 0.00017)]
    schedule = infer_schedule(steps, steps, lr)
    assert loss_divergence(steps, values, "loss", schedule) == []
    # the same tail climbing 20x, back to where the run started, is still a divergence: a rise
    # is judged against the tail's own noise (a factor of 1.3 a point), not the descent's
    rising = values.copy()
    rising[22:] *= np.geomspace(1.0, 20.0, values.size - 22)
    (found,) = loss_divergence(steps, rising, "loss", schedule)
    assert found.kind == "divergence" and found.severity == "critical" and 100 <= found.step <= 125


# zoo_sealed_063 of seed 24171 as its SummaryCollector logged it (every 5th step and step 1, no
# learning rate): Momentum at 0.73 on a 6-layer tanh MLP. Its loss went from 1.3 to 10-24 within
# the first tenth of the run (the default warm-up, where the running best does not start), stayed
# there for 100 steps and came back to 2-4: the run was reported healthy.
EXCURSION_STEPS = np.concatenate(([1], np.arange(5, 296, 5)))
EXCURSION_LOSS = np.array([
    2.09, 2.048, 1.325, 4.271, 8.264, 15.422, 9.564, 10.111, 14.581, 23.255, 23.376, 23.863, 12.366,
    15.366, 13.056, 13.691, 22.23, 18.872, 15.245, 9.549, 13.581, 14.956, 14.201, 6.872, 8.886, 6.6,
    7.832, 4.618, 2.69, 5.956, 4.728, 5.442, 3.644, 4.713, 4.725, 4.589, 5.35, 4.438, 2.813, 2.172,
    2.834, 3.115, 3.239, 7.851, 3.412, 2.629, 3.715, 2.723, 5.193, 3.408, 2.942, 2.692, 2.637, 3.042,
    2.93, 2.575, 3.035, 4.11, 2.402, 3.874,
])


def test_a_recovered_excursion_far_above_the_start_is_a_divergence_warning():
    schedule = infer_schedule(EXCURSION_STEPS)
    found = loss_divergence(EXCURSION_STEPS, EXCURSION_LOSS, "loss/auto", schedule)
    assert [(f.kind, f.severity, f.step) for f in found] == [("divergence", "warning", 15)]
    assert found[0].end_step >= 110 and found[0].evidence["ratio_peak_to_start"] > 10  # 23.9 from its first point, 2.09
    assert "no recovery" in english(found[0])


def test_the_same_excursion_under_twice_the_start_is_none():
    start = np.log(EXCURSION_LOSS[2])
    y = np.log(EXCURSION_LOSS)
    lower = np.exp(start + np.minimum(y - start, np.log(1.9)))  # every point under 1.9x the start
    assert loss_divergence(EXCURSION_STEPS, lower, "loss/auto", infer_schedule(EXCURSION_STEPS)) == []


def test_a_short_excursion_above_twice_the_start_is_left_to_the_spike_detector():
    y = np.log(EXCURSION_LOSS).copy()
    y[9:] = np.log(2.0) + 0.1 * np.sin(np.arange(y.size - 9))  # back after 6 points above twice the start
    assert [f for f in loss_divergence(EXCURSION_STEPS, np.exp(y), "loss/auto", infer_schedule(EXCURSION_STEPS))
            if f.kind == "divergence"] == []


# zoo_seen28_043 as its hooks logged it (every 5th step and step 1, with each window's minimum): a
# one-layer transformer under Momentum at 0.25 whose loss fell from 2.16 to a lucky batch at 0.029
# by step 20, bumped to 1-3 (below where it started) and went on learning to 0.1-0.6. Against the
# lowest of its first points it was a "114x" blow-up, a divergence warning on a healthy run.
LUCKY_LOW_STEPS = np.concatenate(([1], np.arange(5, 201, 5)))
LUCKY_LOW_LOSS = np.array([
    2.161, 1.934, 1.089, 0.3484, 0.02933, 0.6793, 3.341, 2.27, 1.415, 2.171, 1.601, 1.654, 0.4341, 1.332,
    1.674, 1.372, 0.9395, 1.443, 0.908, 0.5585, 0.4658, 0.7222, 0.7461, 0.4973, 0.1439, 0.1259, 0.4312,
    0.2774, 0.5159, 0.596, 0.4233, 0.6509, 0.2213, 0.4886, 0.2033, 0.4254, 0.2312, 0.5124, 0.1301, 0.6493,
    0.456,
])
LUCKY_LOW_WINDOW_MIN = np.array([
    2.161, 1.934, 1.089, 0.3484, 0.02933, 0.6163, 0.9385, 1.143, 1.204, 1.22, 1.196, 0.9316, 0.4341, 0.9707,
    0.772, 0.6524, 0.9293, 0.7754, 0.6508, 0.5585, 0.4658, 0.6132, 0.4068, 0.3474, 0.1439, 0.1259, 0.2317,
    0.1561, 0.1123, 0.2867, 0.2039, 0.4042, 0.2213, 0.1354, 0.2033, 0.2884, 0.06613, 0.2252, 0.1301, 0.1157,
    0.2042,
])


def test_a_lucky_low_batch_among_the_first_points_is_not_where_the_run_started():
    schedule = infer_schedule(LUCKY_LOW_STEPS)
    for window_min in (LUCKY_LOW_WINDOW_MIN, None):
        found = loss_divergence(LUCKY_LOW_STEPS, LUCKY_LOW_LOSS, "loss", schedule, window_min=window_min)
        assert alarms(found) == []


def test_a_bump_twice_above_where_a_run_started_is_still_a_divergence():
    # The first point already holds a blow-up (8.0), the run then learns from 2.1: the warning's
    # start is the median of the first points, said as such
    rng = np.random.default_rng(5)
    steps = np.arange(10, 3010, 10)
    values = np.concatenate(([8.0], 2.1 * np.exp(-np.arange(299) / 150.0))) * np.exp(0.01 * rng.standard_normal(300))
    assert alarms(loss_divergence(steps, values, "loss", infer_schedule(steps))) == []
    values[40:70] = 6.0 * np.exp(0.01 * rng.standard_normal(30))  # about 3x where it started, for 30 points
    found = loss_divergence(steps, values, "loss", infer_schedule(steps))
    assert [(f.kind, f.severity, f.step) for f in found] == [("divergence", "warning", 410)]
    start = float(np.median(values[:5]))
    assert found[0].evidence["start_loss"] == pytest.approx(start)
    at = int(steps[np.flatnonzero(values[:5] == start)[0]])
    assert f"the median of its first logged points ({start:.4g} at step {at}; the first was {values[0]:.4g})" in english(found[0])
    assert f"最初几个记录点的中位数（第 {at} 步的 {start:.4g}" in render_finding(found[0], "zh")["message"]

# zoo_seen_069's logged loss (a real MindSpore MLP under AdamW at 0.046, warm-up and cosine,
# logged every 5th step): it reached float32's 0.0 and stayed there between Inf steps and a few
# hard batches
FIT_TO_ZERO_STEPS = np.array([1, *range(5, 240, 5)])
FIT_TO_ZERO_LOSS = np.array(
    [2.074, 0.05286, np.inf, 1.336, np.inf, np.inf, np.inf, 0.0, np.inf, np.inf, np.inf, 1.544, np.inf, 0.0,
     np.inf, 0.0, 1.3, np.inf, np.inf, np.inf, np.inf, 0.0, 0.0, 4.321e-07, 0.0, np.inf, *[0.0] * 18, 2.217, 0.0,
     0.0, 0.0])



def test_a_loss_that_reached_exactly_zero_is_not_stuck_from_the_start():
    peak = 0.0457
    warm = np.minimum(1.0, FIT_TO_ZERO_STEPS / 10.0)
    lr = peak * warm * 0.5 * (1 + np.cos(np.pi * np.clip((FIT_TO_ZERO_STEPS - 10) / 230, 0, 1)))
    schedule = infer_schedule(FIT_TO_ZERO_STEPS, FIT_TO_ZERO_STEPS, lr)
    assert stalled_convergence(FIT_TO_ZERO_STEPS, FIT_TO_ZERO_LOSS, "loss", schedule) == []
    # the same run held at 1.9 instead of 0.0 (no value at zero, so no shifted log) is stuck
    stuck = np.where(FIT_TO_ZERO_LOSS == 0.0, 1.9 * np.exp(0.01 * np.sin(FIT_TO_ZERO_STEPS)), FIT_TO_ZERO_LOSS)
    stuck[stuck < 1e-3] = 1.9
    assert [f.kind for f in stalled_convergence(FIT_TO_ZERO_STEPS, stuck, "loss", schedule)] == ["stalled_convergence"]


def test_a_spike_s_baseline_is_its_trend_in_loss_units_even_in_a_steep_descent():
    """The evidence's `baseline` is the local trend at the peak (peak / baseline = the ratio the
    message names). It was the median of the points before the excursion, which in a steep
    descent stood above the peak itself (5 of 319 spike findings on the benchmark)."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 401)
    loss = 50.0 * np.exp(-steps / 25.0) + 0.2
    loss *= np.exp(0.02 * rng.standard_normal(steps.size))
    loss[60:62] *= 3.0  # a spike early in the descent
    found = [f for f in loss_spikes(steps, loss, "loss", infer_schedule(steps)) if f.evidence["peak_step"] in (61, 62)]
    assert len(found) == 1
    evidence = found[0].evidence
    assert evidence["baseline"] < evidence["peak_value"]
    assert evidence["peak_value"] / evidence["baseline"] == pytest.approx(evidence["ratio_to_trend"], rel=1e-9)
    shifted = loss - 0.2 - 1.0  # reaches below zero: log_loss shifts it, the baseline stays in loss units
    found = [f for f in loss_spikes(steps, shifted, "loss", infer_schedule(steps)) if f.evidence["peak_step"] in (61, 62)]
    assert len(found) == 1 and shifted.min() < found[0].evidence["baseline"] < found[0].evidence["peak_value"]


# zoo_seen_079's logged loss (a real MindSpore MLP under momentum SGD at 0.2, warm-up to step 30
# and cosine, logged every 5th step) to step 85: it fell from 2.05 to 0.80 within its first six
# points, jumped to 5.4 at step 35 and sat at chance level (about 2.09) to the end
COLLAPSE_STEPS = np.arange(5, 360, 5)
COLLAPSE_HEAD = [2.048, 2.07, 1.97, 1.63, 1.042, 0.802, 5.446, 1.879, 3.229, 2.277, 2.037, 2.371, 2.357, 2.109,
                 2.065, 2.242, 2.065]


def collapsed_to_chance(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tail = 2.09 * np.exp(0.02 * rng.standard_normal(COLLAPSE_STEPS.size - len(COLLAPSE_HEAD)))
    lr = np.where(COLLAPSE_STEPS <= 30, 0.197 * COLLAPSE_STEPS / 30,
                  0.004 + 0.193 * 0.5 * (1 + np.cos(np.pi * (COLLAPSE_STEPS - 30) / 325)))
    return COLLAPSE_STEPS, np.array([*COLLAPSE_HEAD, *tail]), lr


def test_a_run_back_at_its_first_logged_loss_is_not_said_to_end_worse_than_its_initialisation():
    steps, loss, lr = collapsed_to_chance()
    found = alarms(loss_divergence(steps, loss, "loss", infer_schedule(steps, steps, lr)))
    assert [(f.kind, f.severity, f.step) for f in found] == [("divergence", "critical", 35)]
    assert found[0].evidence["start_step"] == 25 and found[0].evidence["first_loss"] == 2.048
    text = english(found[0])
    assert "x above the lowest of its first logged points (1.042 at step 25; the first was 2.048)" in text
    assert "the run lost what it had learned" in text and "worse than at initialisation" not in text
    assert "restart from a checkpoint at or before step 30" in text


def test_a_rise_after_a_fall_within_the_first_points_is_dated_from_where_it_rose():
    # zoo_seen5_119 (logged every 10th step): 2.18, 2.0, 1.38, 0.548 at step 30, 4.2 at step 40,
    # then chance level; the smoothed loss of its first points stands above twice their lowest,
    # which had dated the rise at step 1 and advised no checkpoint
    rng = np.random.default_rng(3)
    steps = np.array([1, *range(10, 430, 10)])
    loss = np.array([2.177, 2.0, 1.38, 0.548, 4.198, *(2.1 * np.exp(0.03 * rng.standard_normal(steps.size - 5)))])
    found = alarms(loss_divergence(steps, loss, "train/loss", infer_schedule(steps)))
    assert [(f.kind, f.severity, f.step) for f in found] == [("divergence", "critical", 40)]
    assert found[0].evidence["peak_step"] == 40 and found[0].evidence["last_healthy_step"] == 30


def test_the_peak_of_a_rise_far_above_the_start_is_within_it_not_an_earlier_spike():
    rng = np.random.default_rng(4)
    steps = np.arange(1, 301)
    y = np.log(2.0) - 0.3 * np.minimum(steps, 50) / 50 + 0.02 * rng.standard_normal(steps.size)
    y[24] = np.log(40.0)  # a one-point spike, the run's largest value
    y[99:130] = np.log(9.0) + 0.02 * rng.standard_normal(31)  # a level held 4.5x above the start
    found = [f for f in loss_divergence(steps, np.exp(y), "loss", infer_schedule(steps)) if f.kind == "divergence"]
    assert [(f.severity, f.step) for f in found] == [("warning", 100)]
    assert 100 <= found[0].evidence["peak_step"] <= 130 and found[0].evidence["peak_loss"] < 10
    assert f"peaking at {found[0].evidence['peak_loss']:.4g} at step {found[0].evidence['peak_step']}" in english(found[0])


def test_an_early_spike_after_the_rate_s_own_warm_up_is_said_to_be_early_not_in_warm_up():
    # zoo_seen10_125 (a rate warmed up to step 95 of 3,661): a spike at step 439 fell within the
    # first tenth of the steps, judged as warm-up, and was said to happen "during warm-up"
    steps, y = curve(1000, interval=1, seed=3, noise=0.02)
    lr = np.minimum(1.0, steps / 20) * 0.1  # the rate's warm-up ends at step 20
    y = y.copy()
    y[[9, 60]] += np.log(3.0)  # one spike in the rate's warm-up, one after it but in the first tenth
    found = loss_spikes(steps, np.exp(y), "loss", infer_schedule(steps, steps, lr))
    said = {f.step: english(f) for f in found if f.kind == "loss_spike"}
    assert all(f.severity == "info" for f in found) and set(said) == {10, 61}
    assert "during warm-up" in said[10] and "early in the run" in said[61] and "warm-up" not in said[61]


def knocked_out_of_convergence(end_level: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """zoo_seen28_066's shape, logged every step: a classifier that fit its data (2.09 down to
    about 0.005), a corrupted batch at step 155 (34.6), then a level that decays towards
    `end_level` and stays above where it was to the end (step 232)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 233)
    level = np.maximum(2.09 * np.exp(-steps / 12.0), 0.005)
    after = steps > 155
    level[after] = end_level + (0.8 - end_level) * np.exp(-(steps[after] - 156) / 15.0)
    loss = level * np.exp(0.3 * rng.standard_normal(steps.size))
    loss[154] = 34.6
    return steps, loss


@pytest.mark.parametrize("seed", range(3))
def test_a_converged_model_a_bad_batch_moved_a_little_has_no_divergence_alarm(seed):
    steps, loss = knocked_out_of_convergence(0.18, seed)
    found = [f for f in loss_divergence(steps, loss, "loss", infer_schedule(steps)) if f.kind == "divergence"]
    assert [(f.severity, f.step) for f in found] == [("info", 155)]
    assert found[0].evidence["end_share"] < 0.25
    assert "the run kept most of what it learned" in english(found[0])
    assert "训练学到的大部分仍在" in render_finding(found[0], "zh")["message"]


@pytest.mark.parametrize("seed", range(3))
def test_the_same_batch_leaving_it_far_from_converged_is_a_divergence(seed):
    steps, loss = knocked_out_of_convergence(1.2, seed)  # back at 57% of its start: most of the learning lost
    found = alarms(loss_divergence(steps, loss, "loss", infer_schedule(steps)))
    assert [(f.kind, f.severity) for f in found] == [("divergence", "critical")]


# zoo_seen29_067's loss as logged (every 10th step): 2.06 at step 1, Inf from step 10 to 110 but
# once, then down from 18.6 to 4.5-7 at the end, 2.3x where it started
BLOWN_UP_STEPS = np.array([1, *range(10, 201, 10)])
BLOWN_UP_LOSS = np.array([2.063, *[np.inf] * 9, 18.6, np.inf, 13.06, 13.13, 7.88, 9.32, 6.96, 4.64, 6.43, 4.79, 4.53])


def test_a_loss_finite_again_after_a_blow_up_but_twice_its_start_did_not_recover():
    found = alarms(loss_divergence(BLOWN_UP_STEPS, BLOWN_UP_LOSS, "loss", infer_schedule(BLOWN_UP_STEPS)))
    assert [(f.kind, f.severity, f.step, f.message) for f in found] == [
        ("divergence", "critical", 10, "divergence.not_recovered")]
    assert found[0].evidence["nonfinite_from_step"] == 10
    assert found[0].evidence["ratio_end_to_start"] == pytest.approx(4.79 / 2.063, rel=1e-3)
    assert "did not recover" in english(found[0]) and "lower the learning rate" in english(found[0])
    assert "没有恢复" in render_finding(found[0], "zh")["message"]


def test_a_blow_up_the_loss_came_back_from_is_left_to_the_non_finite_finding():
    recovered = BLOWN_UP_LOSS.copy()
    recovered[-5:] = [1.31, 1.12, 1.25, 0.98, 1.07]  # the end back under where it started
    found = alarms(loss_divergence(BLOWN_UP_STEPS, recovered, "loss", infer_schedule(BLOWN_UP_STEPS)))
    assert not any(f.message == "divergence.not_recovered" for f in found)


def test_not_recovered_is_judged_on_the_last_tenth_not_the_last_few_points():
    """zoo_seen25_046's pattern: its last five points stood 2.3x above its start, its last tenth
    at 0.3x; the run came back, and a few high points at the end are not its level."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, 301)
    loss = 2.0 * np.exp(-steps / 40.0) + 0.3 + 0.02 * rng.standard_normal(steps.size)
    loss[20:40] = np.inf
    loss[-4:] = 5.0
    found = loss_divergence(steps, loss, "loss", infer_schedule(steps))
    assert not any(f.message == "divergence.not_recovered" for f in found)
    loss[-40:] = 5.0  # now the end level itself stands there (a rise open at the end says so first)
    found = loss_divergence(steps, loss, "loss", infer_schedule(steps))
    assert [f.severity for f in found if f.kind == "divergence"] == ["critical"]
