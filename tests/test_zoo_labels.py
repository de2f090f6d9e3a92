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


def test_layers_that_read_zero_once_the_loss_is_nan_are_the_blow_up_not_vanishing():
    rng = np.random.default_rng(4)
    layers = [np.abs(rng.normal(1.0, 0.1, 400)) for _ in range(4)]
    for layer in layers[:3]:
        layer[60:] = 0.0  # what a float16 run's hooks logged after its loss went NaN at step 60
    layers[3][60:] = np.nan
    finite_loss = np.arange(400) < 60
    assert zoo_labels.layer_vanishing(layers)  # by every point: "dead layers"
    assert not zoo_labels.layer_vanishing(layers, finite_loss)
    layers[1][30:60] = 0.0  # dead while the loss was still finite: half of the finite points
    assert zoo_labels.layer_vanishing(layers, finite_loss)


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


def plateau_then(rng: np.random.Generator, n: int, plateau_share: float, end_level: float) -> np.ndarray:
    """A per-step cross-entropy at chance (ln 8) for `plateau_share` of the run, then falling
    linearly to `end_level`, with minibatch noise of 2%."""
    level = np.full(n, np.log(8.0))
    escape = int(plateau_share * n)
    level[escape:] = np.linspace(np.log(8.0), end_level, n - escape)
    return level * np.exp(0.02 * rng.standard_normal(n))


def test_a_run_stuck_at_chance_with_a_nan_it_recovered_from_is_stalled():
    loss = plateau_then(np.random.default_rng(4), 300, 1.0, np.log(8.0))
    loss[150] = np.nan  # a float16 overflow the run went on from
    labels, _ = zoo_labels.label_run(loss, np.ones(300), every_step)
    assert "nonfinite" in labels and "stalled_convergence" in labels


def test_a_run_that_left_its_plateau_and_learned_is_not_stalled():
    # like a deep sigmoid net: at chance for 60% of the run, then down to 1.66
    loss = plateau_then(np.random.default_rng(5), 250, 0.6, 1.5)
    labels, _ = zoo_labels.label_run(loss, np.ones(250), every_step)
    assert "stalled_convergence" not in labels



def test_a_vanishing_gradient_run_whose_loss_did_not_move_is_labelled_stalled_too():
    from bench.detection import cases_signals

    spec = {"scenario": "vanishing"}
    steps = np.arange(300)
    rng = np.random.default_rng(7)
    flat = 0.2 * np.exp(0.01 * rng.standard_normal(300))  # a deep sigmoid stack's MSE, stuck
    learning = 0.2 * np.exp(-np.linspace(0, 1, 300)) * np.exp(0.01 * rng.standard_normal(300))
    lr = (steps, np.full(300, 0.1))
    stuck = cases_signals.ms_labels(spec, {"train/loss": (steps, flat), "train/lr": lr})
    moving = cases_signals.ms_labels(spec, {"train/loss": (steps, learning), "train/lr": lr})
    assert set(stuck) == {"vanishing_gradients", "stalled_convergence"}
    assert set(moving) == {"vanishing_gradients"}


def near_zero_run_with_a_corrupted_batch(rng: np.random.Generator, after_level: float) -> np.ndarray:
    """A converged classifier's per-step loss near 0.07 (start 2.1), a batch at 5.9 at step 93,
    then `after_level` times the context for 20 steps before settling again."""
    loss = np.concatenate([np.linspace(2.1, 0.07, 40), np.full(235, 0.07)]) * np.exp(0.3 * rng.standard_normal(275))
    loss[93] = 5.9
    loss[94:114] *= after_level
    return loss


def test_a_spike_that_gave_back_its_jump_is_labelled_even_when_the_context_was_noisy():
    # like zoo_dev_116 (the next steps' median at 1.53 times a context of 0.07): here 2.5 times the
    # context, which the "1.5 times" form refuses, while 98% of the jump is given back
    loss = near_zero_run_with_a_corrupted_batch(np.random.default_rng(8), after_level=2.5)
    initial = float(np.median(loss[:5]))
    assert 93 in zoo_labels.spike_steps(loss, initial, 5)


def test_a_jump_the_loss_stays_at_is_no_spike():
    loss = near_zero_run_with_a_corrupted_batch(np.random.default_rng(9), after_level=40.0)
    initial = float(np.median(loss[:5]))
    assert 93 not in zoo_labels.spike_steps(loss, initial, 5)


def test_hard_batches_one_step_in_four_reaches_are_no_spikes():
    # like zoo_dev_050: a float16 classifier at exactly 0 on most batches, 1-5 on one in four
    rng = np.random.default_rng(10)
    loss = np.where(rng.random(300) < 0.25, rng.uniform(1.0, 5.0, 300), 0.0)
    loss[:20] = np.linspace(2.1, 0.5, 20)
    assert zoo_labels.spike_steps(loss, 2.0, 6) == []
    loss[200] = 40.0  # a corrupted batch far above anything the run reaches
    assert zoo_labels.spike_steps(loss, 2.0, 6) == [200]


def test_wide_noise_alone_gets_no_spike_label():
    """Rule 6's other thresholds are in the loss's units: stationary log-normal noise of sd 1 and
    nothing else passed them at about 9 steps in 1,000 (`bench/detection/label_null.py`, stop 50);
    its own noise test asks a jump to stand out of the run's spread."""
    rng = np.random.default_rng(31)
    loss = np.exp(rng.standard_normal(2000))
    assert zoo_labels.spike_steps(loss, 1.0, zoo_labels.smoothing_window(loss.size)) == []
    loss[1500] = 500.0  # far beyond the noise (6.2 sds): still one
    assert zoo_labels.spike_steps(loss, 1.0, zoo_labels.smoothing_window(loss.size)) == [1500]


def test_a_fall_before_a_spike_is_no_noise_that_hides_it():
    """Like zoo_seen24_094 at step 82: a corrupted batch 7.9x above its context while the loss was
    still falling. The noise test taken over the raw log-loss of the 100 steps before it counted
    the fall as spread (here 0.56: a jump had to be 11x) and refused it; around the running
    median the spread is the noise's, 0.19 (2.3x)."""
    rng = np.random.default_rng(32)
    steps = np.arange(300)
    loss = (2.1 * np.exp(-steps / 40.0) + 0.4) * np.exp(0.2 * rng.standard_normal(300))
    loss[90] = 8.0 * float(np.median(loss[70:90]))
    assert zoo_labels.spike_steps(loss, 2.1, zoo_labels.smoothing_window(loss.size)) == [90]


def test_a_spike_shows_in_interval_means_when_it_lifts_its_mean_by_a_third_or_more():
    # like zoo_sealed_007: a corrupted batch at 50x a loss of 0.11, logged as means of 10 steps
    from bench.detection.cases_zoo import visibility

    rng = np.random.default_rng(11)
    loss = 0.11 * np.exp(rng.normal(0, 0.3, 300))
    loss[154] = 5.6
    loss[254] = 0.11 * 3.0  # a 3x batch: lifts its mean of 10 by about 20%, which no mean shows
    logged = np.arange(10, 301, 10)
    visible = visibility(logged, window_max=False, points=False, loss=loss)
    assert visible(154, persistent=False) == 160
    assert visible(254, persistent=False) is None
    points = visibility(logged, window_max=False, points=True, loss=loss)  # the step itself is not logged
    assert points(154, persistent=False) is None


def excursion_run(n: int = 300, start: int = 20, length: int = 60, factor: float = 8.0) -> np.ndarray:
    """A cross-entropy that learns (2.08 down to 0.5) except for `length` steps from `start`,
    where it stands `factor` times above its untrained loss, then comes back."""
    rng = np.random.default_rng(8)
    loss = np.log(8.0) * np.exp(-np.linspace(0, 1.4, n)) * np.exp(0.03 * rng.standard_normal(n))
    loss[start:start + length] = factor * np.log(8.0) * np.exp(0.03 * rng.standard_normal(length))
    return loss


def logged_every(interval: int, first: int | None = None):
    """`visible_step` of a log of every `interval`-th step (and step `first`, when given)."""
    steps = np.arange(interval, 10_000, interval)
    if first is not None:
        steps = np.concatenate(([first], steps))

    def visible(k: int, persistent: bool = True, nonfinite: bool = False) -> int:
        return int(steps[np.searchsorted(steps, k + 1)])

    return visible


def test_a_rise_far_above_the_start_that_came_back_is_a_divergence():
    labels, _ = zoo_labels.label_run(excursion_run(), np.ones(300), every_step)
    assert "divergence" in labels
    small, _ = zoo_labels.label_run(excursion_run(factor=1.5), np.ones(300), every_step)
    assert "divergence" not in small  # under twice the start


def test_that_rise_is_labelled_only_where_the_logs_show_it():
    early = excursion_run(start=1, length=60)  # blew up at step 2: every 10th step from 10 shows no start
    assert "divergence" not in zoo_labels.label_run(early, np.ones(300), logged_every(10))[0]
    assert "divergence" in zoo_labels.label_run(early, np.ones(300), logged_every(5, first=1))[0]  # step 1 logged
    short = excursion_run(length=30)  # 3 points when logged every 10th step: a spike's width
    assert "divergence" not in zoo_labels.label_run(short, np.ones(300), logged_every(10, first=1))[0]


def test_the_rise_around_an_overflow_is_the_overflow():
    loss = excursion_run(length=60)
    loss[25:75] = np.inf  # the high values are the edges of a non-finite episode
    labels, _ = zoo_labels.label_run(loss, np.ones(300), every_step)
    assert "nonfinite" in labels and "divergence" not in labels


def test_a_jump_beside_a_nan_step_is_that_overflow_not_a_spike():
    # like a float16 Adam run: 4.2 against a context of 0.085, then Inf, then the run went on
    loss = near_zero_run_with_a_corrupted_batch(np.random.default_rng(11), after_level=1.0)
    initial = float(np.median(loss[:5]))
    assert 93 in zoo_labels.spike_steps(loss, initial, 5)
    loss[94] = np.inf
    assert 93 not in zoo_labels.spike_steps(loss, initial, 5)


def test_a_jump_the_run_follows_into_nan_for_good_did_not_recover():
    # like a float16 SGD run: 5.3 times its context, four finite steps, then Inf to the end;
    # skipping the NaNs, the median of the next steps had called that a recovery
    loss = near_zero_run_with_a_corrupted_batch(np.random.default_rng(12), after_level=1.0)
    initial = float(np.median(loss[:5]))
    loss[98:] = np.nan
    assert 93 not in zoo_labels.spike_steps(loss, initial, 5)
    loss[98:] = loss[60:60 + loss.size - 98]  # the same run, finite after the jump: a spike
    loss[105] = np.nan  # one overflowed step later on does not undo its recovery
    assert 93 in zoo_labels.spike_steps(loss, initial, 5)


def test_the_per_step_log_noise_is_the_spread_around_the_trend_not_the_trend():
    rng = np.random.default_rng(13)
    trend = np.exp(-np.linspace(0, 4, 400))  # a fall over 4 e-folds: no noise of its own
    for sd in (0.05, 0.5, 1.0):
        noise = zoo_labels.log_noise(2.0 * trend * np.exp(sd * rng.standard_normal(400)))
        assert abs(noise - sd) < 0.15 * sd
    assert zoo_labels.log_noise(2.0 * trend) < 1e-3
    assert zoo_labels.log_noise(np.where(np.arange(400) < 50, 2.0, np.nan)) is None  # NaN after 50 steps


def test_an_exploding_norm_is_labelled_only_when_the_logs_show_where_it_started():
    """Rule 3, as rule 2 for the loss: a log whose first gradient norm is already 100x up (or not
    finite) shows no start to rise from (zoo_seen3_027: every 20th step, 1.7e12 at step 20)."""
    grad = np.concatenate([np.full(15, 0.5), np.full(25, 1e12), np.full(260, np.nan)])
    steps = np.arange(grad.size)
    every_fifth, every_twentieth = steps % 5 == 4, steps % 20 == 19
    assert zoo_labels.exploding_step(grad, 6, shown=every_fifth) == 15
    assert zoo_labels.exploding_step(grad, 6, shown=every_twentieth) is None
    assert zoo_labels.exploding_step(grad, 6, shown=every_fifth & (steps >= 20)) is None



def converged_log(points: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A converged loss logged every 5 steps: 0.4 with 5% noise (log sd)."""
    logged = np.arange(5, 5 * points + 1, 5)
    return 0.4 * np.exp(0.05 * rng.standard_normal(points)), logged


def test_an_injected_batch_the_logs_show_is_a_spike_under_twice_its_context():
    # Rule 6 asks a natural spike to double its context and add half the initial loss; a
    # corrupted batch that lifts a converged loss 1.8x is an event all the same (rule 6b).
    rng = np.random.default_rng(0)
    shown, logged = converged_log(100, rng)
    shown[60] *= 1.8  # logged step 305: the batch of raw step 304
    assert zoo_labels.injected_spikes(shown, logged, [304], window=10) == [305]


def test_an_injected_batch_seen_only_at_the_next_logged_point_is_labelled_there():
    rng = np.random.default_rng(1)
    shown, logged = converged_log(100, rng)
    shown[60] *= 3.0  # the batch at raw step 301 (step 302) was not logged; step 305 shows its aftermath
    assert zoo_labels.injected_spikes(shown, logged, [301], window=10) == [305]


def test_an_injected_batch_the_noise_hides_or_the_run_follows_is_no_spike():
    rng = np.random.default_rng(2)
    shown, logged = converged_log(100, rng)
    shown[60] *= 1.1  # within what the points before it reach
    assert zoo_labels.injected_spikes(shown, logged, [304], window=10) == []
    shown, logged = converged_log(100, rng)
    shown[60:] *= 3.0  # the loss stays where the batch threw it: a divergence, not a spike
    assert zoo_labels.injected_spikes(shown, logged, [304], window=10) == []
    shown, logged = converged_log(100, rng)
    shown[61] = np.nan  # beside a NaN: rule 1's event
    shown[60] *= 3.0
    assert zoo_labels.injected_spikes(shown, logged, [304], window=10) == []


def test_the_loss_as_logged_is_each_paths_own_view():
    from bench.detection.cases_zoo import logged_loss

    loss = np.arange(1.0, 11.0)  # steps 1..10
    logged = np.array([1, 5, 10])  # step 1 too, as our hooks log it
    assert logged_loss(loss, logged, points=True, window_max=False)[0].tolist() == [1.0, 5.0, 10.0]
    assert logged_loss(loss, logged, points=False, window_max=True)[0].tolist() == [1.0, 5.0, 10.0]
    loss[2] = 50.0  # step 3: only the window maximum of steps 2-5 shows it
    assert logged_loss(loss, logged, points=False, window_max=True)[0].tolist() == [1.0, 50.0, 10.0]
    means, at = logged_loss(loss, np.array([5, 10]), points=False, window_max=False)
    assert at.tolist() == [5, 10] and means.tolist() == [np.mean(loss[:5]), np.mean(loss[5:])]


def test_a_loss_stuck_at_zero_has_no_spikes():
    # A float32 run at Inf or exactly 0 from its second step (zoo_seen28_117): its start level is
    # 0, so "twice the context" and "half the initial loss" were met by a 0 among 0s.
    rng = np.random.default_rng(3)
    loss = np.where(rng.random(250) < 0.15, np.inf, 0.0)
    loss[0] = 5.1
    safe = np.where(np.isfinite(loss), loss, np.nan)
    initial, _ = zoo_labels.start_levels(safe)
    assert initial == 0.0
    assert zoo_labels.spike_steps(safe, initial, zoo_labels.smoothing_window(loss.size)) == []
    logged = np.arange(5, 251, 5)
    shown = np.zeros(logged.size)
    assert zoo_labels.injected_spikes(shown, logged, [150, 200], window=5) == []
    assert not zoo_labels.lifts_mean(shown, 30)
    loss[120:123] = 0.0
    loss[121] = 3.0  # a real rise above that 0 is still one
    safe = np.where(np.isfinite(loss), loss, np.nan)
    assert 121 in zoo_labels.spike_steps(safe, initial, zoo_labels.smoothing_window(loss.size))
    shown[30] = 2.0
    assert zoo_labels.injected_spikes(shown, logged, [150], window=5) == [155]
    assert zoo_labels.lifts_mean(shown, 30)
