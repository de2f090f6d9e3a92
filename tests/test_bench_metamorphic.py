"""The benchmark's metamorphic "healthy tail": a run that simply went on, not one sent back."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.detection import metamorphic


def test_the_healthy_tail_of_a_still_improving_run_does_not_jump_back_up():
    """Drawing the last fifth's raw values put a run still halving its loss there back to where
    it was a fifth of the run earlier: a jump up that detectors rightly called a spike."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, 401)
    loss = 2.0 * (steps / 100.0) ** -1.2 * np.exp(0.05 * rng.standard_normal(steps.size))
    source = np.arange(320, 400)
    new_steps = np.arange(401, 601)
    drawn = rng.choice(source.size, new_steps.size)
    tail = metamorphic.continued(steps[source], loss[source], new_steps, drawn, carry_slope=True)
    end_level = np.median(loss[-20:])
    assert np.median(tail[:20]) <= 1.05 * end_level
    assert np.median(tail[-20:]) <= np.median(tail[:20])  # and it goes on improving


def test_the_healthy_tail_of_a_flat_run_stays_at_its_level():
    rng = np.random.default_rng(1)
    steps = np.arange(1, 401)
    loss = 0.3 * np.exp(0.1 * rng.standard_normal(steps.size))
    source = np.arange(320, 400)
    tail = metamorphic.continued(steps[source], loss[source], np.arange(401, 601), rng.choice(80, 200), carry_slope=True)
    assert abs(np.log(np.median(tail)) - np.log(0.3)) < 0.05


def test_renderings_of_another_seed_are_not_taken_for_this_one(monkeypatch, tmp_path):
    """The renderings' cache was keyed by the split's name: a new sealed seed was analysed in the
    previous seed's renderings (the same run names), and its invariance rows were the old runs'."""
    from bench.detection import cases_zoo

    monkeypatch.setenv("TB_HEALTH_ZOO_CACHE", str(tmp_path))
    specs = cases_zoo.specs("sealed")[:3]
    assert metamorphic.rendered_root("sealed", specs) == metamorphic.rendered_root("sealed", [dict(s) for s in specs])
    monkeypatch.setitem(cases_zoo.SPLIT_SEEDS, "sealed", cases_zoo.SPLIT_SEEDS["sealed"] + 1)
    reseeded = cases_zoo.specs("sealed")[:3]
    assert [s["name"] for s in reseeded] == [s["name"] for s in specs]
    assert metamorphic.rendered_root("sealed", reseeded) != metamorphic.rendered_root("sealed", specs)


def test_the_long_zoo_runs_fill_the_every_50_steps_renderings(monkeypatch):
    """The zoo's runs of 200-500 steps keep 4-10 points logged every 50 steps, under the checks'
    minimum, so the every-50 invariance had no runs; the long runs after them keep enough, and
    drawing them leaves every earlier run's settings as they were."""
    from bench.detection import cases_zoo

    for split, extra in cases_zoo.LONG_SIZES.items():
        specs = cases_zoo.specs(split)
        short, long = specs[: cases_zoo.SPLIT_SIZES[split]], specs[cases_zoo.SPLIT_SIZES[split] :]
        assert len(long) == extra
        assert all(spec["steps"] // 50 >= metamorphic.MIN_POINTS for spec in long)
        assert all(spec["steps"] // 50 < metamorphic.MIN_POINTS for spec in short)
        monkeypatch.setattr(cases_zoo, "LONG_SIZES", {})
        assert cases_zoo.specs(split) == short
        monkeypatch.undo()


def zoo_run(loss: np.ndarray):
    from pathlib import Path

    from bench.detection.cases_zoo import ZooRun

    n = loss.size
    return ZooRun({}, loss, np.ones(n), np.full(n, 0.1), np.full(n, 0.01), Path("."))


def test_a_blow_up_within_the_first_window_hides_the_start_from_sparse_renderings():
    from bench.detection import metamorphic

    loss = np.full(300, 2.08)
    loss[1:40] = 15.0  # from step 2: every 5th or 10th point from step 5 or 10 starts up there
    run = zoo_run(loss)
    assert metamorphic._start_hidden(run, 10, means=False) and metamorphic._start_hidden(run, 10, means=True)
    assert not metamorphic.applies("every_10_points", {"divergence": [2]}, run)
    loss[1:40] = np.inf  # its first kept points non-finite, the first finite one back at the start
    assert not metamorphic._start_hidden(zoo_run(loss), 10, means=False)
    later = np.full(300, 2.08)
    later[50:90] = 15.0  # a rise after the first window: the renderings show where it rose from
    assert not metamorphic._start_hidden(zoo_run(later), 10, means=False)
    assert metamorphic.applies("every_10_points", {"divergence": [51]}, zoo_run(later))


def test_a_gradient_blow_up_within_the_first_window_hides_the_start_from_sparse_renderings():
    loss = np.full(300, 2.08)
    run = zoo_run(loss)
    run.grad_norm[2:] = 5e4  # from step 3, 5e4 against 1 at step 1: the first kept norm is already up
    assert metamorphic._start_hidden(run, 5, means=False) and metamorphic._start_hidden(run, 5, means=True)
    later = zoo_run(loss)
    later.grad_norm[60:] = 5e4  # a rise after the first window: the renderings show where it rose from
    assert not metamorphic._start_hidden(later, 5, means=False)


def lag1(x: np.ndarray) -> float:
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


def test_a_healthy_tail_keeps_the_correlation_of_the_run_s_residuals():
    """Residuals drawn one by one are independent whatever the run's were; blocks keep most of
    a lag-1 correlation of 0.5 (the spike detector discounts correlated points, so a tail of
    independent draws changed its verdict on the run's earlier points)."""
    rng = np.random.default_rng(3)
    source = np.zeros(400)
    for i in range(1, source.size):
        source[i] = 0.5 * source[i - 1] + rng.standard_normal()
    drawn = metamorphic.moving_blocks(source.size, 2000, np.random.default_rng(4))
    assert drawn.size == 2000 and drawn.min() >= 0 and drawn.max() < source.size
    assert 0.3 < lag1(source[drawn]) < 0.6
    assert abs(lag1(source[rng.choice(source.size, 2000)])) < 0.1  # the draws this check used to make


def event_files(folder) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("events.out.tfevents.*"))


def test_a_rendering_finished_meanwhile_by_another_benchmark_is_kept_whole(tmp_path, monkeypatch):
    """Two benchmarks of one split at once: the second to finish a run must not add its event
    files to the first's (two files per rendering changed verdicts). The other process is played
    by a nested render of the same run, done while this one is writing its first rendering."""
    rng = np.random.default_rng(3)
    run = zoo_run(2.0 * np.exp(-np.arange(300) / 150) + 0.05 * rng.random(300))
    runs, labels = {"zoo_x_000": run}, {"zoo_x_000": {}}
    alone = tmp_path / "alone"
    metamorphic.render_all(runs, labels, alone)
    expected = event_files(alone / "zoo_x_000")
    assert expected and len(expected) == len({Path(name).parent for name in expected}) + 1  # resume: 2 files

    shared = tmp_path / "rendered" / "split-0"
    write = metamorphic.write
    calls = []

    def write_while_another_finishes(rendering, folder):
        calls.append(folder)
        if len(calls) == 1:
            monkeypatch.setattr(metamorphic, "write", write)
            metamorphic.render_all(runs, labels, shared)  # the other benchmark, start to finish
            monkeypatch.setattr(metamorphic, "write", write_while_another_finishes)
        write(rendering, folder)

    monkeypatch.setattr(metamorphic, "write", write_while_another_finishes)
    metamorphic.render_all(runs, labels, shared)
    assert len(event_files(shared / "zoo_x_000")) == len(expected)
    assert sorted(path.name for path in shared.parent.iterdir()) == ["split-0"]  # no private folder left


def test_a_change_confined_to_an_undetermined_kind_is_counted_apart_and_still_counted():
    """seen26 (stop 50): four of nine breaks under every 5th point were stalls that the zoo's own
    rule leaves undetermined for those runs. The held share still counts them; the second share
    does not, and a change in any other kind beside the undetermined one counts in both."""
    undecided = frozenset({"stalled_convergence"})
    assert metamorphic.only_undetermined({"stalled_convergence"}, set(), undecided)
    assert metamorphic.only_undetermined({"nonfinite", "stalled_convergence"}, {"nonfinite"}, undecided)
    assert not metamorphic.only_undetermined({"stalled_convergence"}, {"divergence"}, undecided)
    assert not metamorphic.only_undetermined({"stalled_convergence"}, set(), frozenset())
    assert not metamorphic.only_undetermined({"nonfinite"}, {"nonfinite"}, undecided)
    outcome = metamorphic.Outcome("every_5_points", 100, [("a", {"stalled_convergence"}, set()),
                                                          ("b", {"loss_spike"}, set())], {"a"})
    assert outcome.held_share == 0.98
    assert outcome.held_share_determined == 0.99
