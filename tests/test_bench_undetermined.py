"""The zoo's stall label where its own every-step loss cannot place a run on either side of the
5% line: both verdicts are accepted there, and neither is scored."""

from __future__ import annotations

import numpy as np

from bench.detection import zoo_labels
from bench.detection.case import Case
from bench.detection.run import Predictions, healthy_alarm_share, misses, run_level


def chance_level_run(change: float, noise: float, n: int = 300, seed: int = 0) -> np.ndarray:
    """A cross-entropy near chance (ln 8) that moves by `change` over the run (the high-rate
    stretch is the whole run after its first tenth: constant rate), with log-normal minibatch
    noise of `noise`."""
    rng = np.random.default_rng(seed)
    level = np.log(8.0) * np.exp(np.log1p(change) * np.linspace(-0.1, 1.0, n))
    return level * np.exp(noise * rng.standard_normal(n))


def test_a_noisy_run_near_the_five_percent_line_is_undetermined():
    # 10% minibatch noise: Sen's interval of the change is about +-3%, as in the zoo's noisy runs
    changes = [zoo_labels.stall_change(chance_level_run(-0.055, noise=0.1, seed=seed), None, 2.0) for seed in range(20)]
    straddling = [c for c in changes if c.low < -np.log1p(0.05) < c.high]
    assert len(straddling) >= 15  # a 95% interval holds the true -5.5%, half a point from the line, most times
    assert all(c.undetermined for c in straddling)
    # the same runs, labelled by the point estimate alone, fall on both sides of the line
    assert 0 < sum(c.stalled for c in changes) < len(changes)


def test_a_clear_stall_and_a_clear_learner_are_determined():
    flat = chance_level_run(-0.005, noise=0.01, seed=1)  # interval well inside +-5%
    learning = chance_level_run(-0.4, noise=0.15, seed=2)  # well outside
    assert zoo_labels.stalled_run(flat, None) and not zoo_labels.stall_undetermined(flat, None)
    assert not zoo_labels.stalled_run(learning, None) and not zoo_labels.stall_undetermined(learning, None)


def test_the_same_distance_from_the_line_is_determined_in_a_quiet_loss():
    # -5.5% with 1% noise: the every-step line places it outside the band
    assert not zoo_labels.stall_undetermined(chance_level_run(-0.055, noise=0.01, seed=3), None)


def test_only_a_run_without_a_divergence_label_can_have_its_stall_undetermined():
    """Rule 5 judges only runs that rule 2 did not call diverged, for the label and for its doubt."""
    straddling = next(
        loss for loss in (chance_level_run(-0.055, noise=0.1, seed=seed) for seed in range(20))
        if zoo_labels.stall_undetermined(loss, None)
    )
    assert zoo_labels.undetermined_kinds({}, straddling, None) == {"stalled_convergence"}
    assert zoo_labels.undetermined_kinds({"divergence": [30]}, straddling, None) == frozenset()


def test_an_undetermined_kind_is_neither_a_hit_a_miss_nor_a_false_alarm():
    stall = "stalled_convergence"
    either = frozenset({stall})
    cases = [
        Case("labelled_found", print, {stall: [1]}, undetermined=either),
        Case("labelled_missed", print, {stall: [1]}, undetermined=either),
        Case("healthy_found", print, {}, undetermined=either),
        Case("healthy_other_alarm", print, {}, undetermined=either),
        Case("scored_miss", print, {stall: [1]}),
    ]
    predictions = Predictions("tb-health", alarms={
        "labelled_found": [(stall, 1)], "healthy_found": [(stall, 1)], "healthy_other_alarm": [(stall, 1), ("loss_spike", 50)],
    })
    counts = run_level(cases, predictions, stall)
    assert (counts.tp, counts.fp, counts.fn) == (0, 0, 1)  # only the determined case is scored
    # healthy: no determined label; alarmed: a finding of a determined kind
    assert [c.name for c in cases if c.healthy] == ["labelled_found", "labelled_missed", "healthy_found", "healthy_other_alarm"]
    assert healthy_alarm_share(cases, predictions) == 0.25
    lines = misses(cases, predictions)
    assert [line.split(":")[0].strip() for line in lines] == ["healthy_other_alarm", "scored_miss"]


def test_a_loss_that_rose_at_chance_level_is_a_determined_stall():
    """Rule 5 asks whether the loss improved by 5%, not whether it moved: a run at chance whose
    loss rose was labelled healthy (+9%, its interval beyond +5%) or undetermined (an interval
    holding +5%) when the rule asked for a change within +-5%."""
    rising = [chance_level_run(rise, noise=0.1, seed=seed) for rise in (0.09, 0.3) for seed in range(5)]
    assert all(zoo_labels.stalled_run(loss, None) and not zoo_labels.stall_undetermined(loss, None) for loss in rising)
