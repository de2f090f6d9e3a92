"""Step-time regressions within a run and ranks that lag or depart from their job."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.throughput import rank_check, step_time_check
from tb_health_plugin.analysis.detectors.throughput import (
    rank_loss_departures,
    rank_time_outliers,
    step_time_regression,
)
from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries


def english(event) -> str:
    """The event's message as the English report writes it."""
    return render_finding(event, "en")["message"]


def step_times(n=1500, ms=120.0, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = ms * np.exp(rng.normal(0, 0.05, n))
    t[0] *= 50  # graph compilation
    t[100::100] *= 8  # evaluation pauses
    return t


def test_compilation_and_evaluation_pauses_are_not_a_regression():
    assert step_time_regression(step_times()) is None


def test_a_lasting_slowdown_is_found_at_its_change_point():
    t = step_times()
    t[900:] *= 1.6
    slowdown = step_time_regression(t)
    assert slowdown is not None and 895 <= slowdown.step <= 905
    assert slowdown.severity == "warning" and 1.5 < slowdown.evidence["slowdown"] < 1.7


def test_a_slowdown_that_cost_more_than_half_the_run_is_critical():
    t = step_times()
    t[375:] *= 3  # 1125 of 1500 steps at 3x: 60% of the run's time lost
    slowdown = step_time_regression(t)
    assert slowdown.severity == "critical" and slowdown.evidence["lost_share"] > 0.5


def test_a_gradual_drift_is_found():
    # a 1.8x ramp: either the best split already shows 1.25x or the ends are compared
    t = step_times() * np.linspace(1, 1.8, 1500)
    slowdown = step_time_regression(t)
    assert slowdown is not None and slowdown.evidence["slowdown"] >= 1.25


def test_throughput_alone_is_checked_as_time_per_sample():
    t = step_times()
    t[700:] *= 2
    steps = np.arange(t.size) * 10
    data = RunData("run", scalars={"throughput": ScalarSeries.from_lists(steps, 64 / (t / 1000))})
    findings = step_time_check(RunSignals.from_run(data))
    assert len(findings) == 1 and findings[0].kind == "throughput" and findings[0].severity == "warning"
    assert "samples/s" in english(findings[0]) and 6990 <= findings[0].step <= 7010


def test_the_slow_rank_is_the_outlier_and_similar_fast_ranks_are_not():
    assert rank_time_outliers({"r0": 100, "r1": 103, "r2": 97, "r3": 101}) == {}
    found = rank_time_outliers({"r0": 100, "r1": 103, "r2": 140, "r3": 101})
    assert list(found) == ["r2"] and found["r2"].evidence["slowdown"] > 1.3


def test_a_rank_whose_loss_departs_is_found_from_where_it_departs():
    rng = np.random.default_rng(1)
    steps = np.arange(400)
    curve = 3 * np.exp(-steps / 150) + 0.5
    losses = {f"r{i}": curve * np.exp(rng.normal(0, 0.03, 400)) for i in range(5)}
    assert rank_loss_departures(steps, losses) == {}
    losses["r3"] = losses["r3"].copy()
    losses["r3"][250:] *= 2
    found = rank_loss_departures(steps, losses)
    assert list(found) == ["r3"] and 248 <= found["r3"].step <= 252


def test_job_checks_run_through_the_engine_on_rank_runs():
    rng = np.random.default_rng(2)
    steps = np.arange(300) * 10
    runs = []
    for rank in range(4):
        t = 80 * np.exp(rng.normal(0, 0.03, 300)) * (1.8 if rank == 2 else 1.0)
        loss = 2 * np.exp(-steps / 1000) + 0.3
        runs.append(
            RunData(
                f"job/rank_{rank}",
                scalars={
                    "train/step_time_ms": ScalarSeries.from_lists(steps, t),
                    "train/loss": ScalarSeries.from_lists(steps, loss * np.exp(rng.normal(0, 0.02, 300))),
                },
            )
        )
    reports = {r["run"]: r for r in analyze_runs(runs)}
    slow = [f for f in reports["job/rank_2"]["findings"] if f["kind"] == "throughput"]
    assert len(slow) == 1 and slow[0]["evidence"]["what"] == "slow_rank"
    for rank in (0, 1, 3):
        assert not [f for f in reports[f"job/rank_{rank}"]["findings"] if f["kind"] == "throughput"]
    direct = rank_check({r.name: RunSignals.from_run(r) for r in runs})
    assert list(direct) == ["job/rank_2"]


def timed_run(t_ms: np.ndarray, name="run", every=1, start=1.7e9) -> RunData:
    """A run logging its step time (ms) every `every` steps, wall times consistent with it."""
    steps = np.arange(1, t_ms.size + 1) * every
    wall = start + np.cumsum(t_ms * every) / 1000
    return RunData(name, scalars={"train/step_time_ms": ScalarSeries.from_lists(steps, t_ms, wall)})


def test_a_sustained_2x_slowdown_over_half_the_run_is_a_warning():
    t = step_times()
    t[750:] *= 2  # a third of the run's time lost, over 180 s
    findings = step_time_check(RunSignals.from_run(timed_run(t)))
    assert [f.severity for f in findings] == ["warning"]
    e = findings[0].evidence
    assert 0.25 < e["lost_share"] < 0.4 and e["slow_seconds"] > 100
    assert "of the run's time" in english(findings[0])


def test_a_slowdown_in_the_last_seconds_of_a_short_run_is_only_info():
    # the demo's case on a loaded machine: 600 steps of 15 ms, 2.5x slower for the last 60 steps
    rng = np.random.default_rng(3)
    t = 15 * np.exp(rng.normal(0, 0.05, 120))  # logged every 5 steps
    t[0] *= 50
    t[108:] *= 2.5
    findings = step_time_check(RunSignals.from_run(timed_run(t, every=5)))
    assert [f.severity for f in findings] == ["info"]
    assert findings[0].evidence["slow_seconds"] < 60 and "no alarm" in english(findings[0])


def test_a_slowdown_costing_a_small_share_of_the_run_is_only_info():
    t = step_times()
    t[1320:] *= 1.3  # the last 12% of the steps at 1.3x: 3.5% of the run's time
    slowdown = step_time_regression(t)
    assert slowdown is not None and slowdown.severity == "info"
    assert 0.02 < slowdown.evidence["lost_share"] < 0.05


def test_a_brief_slowdown_costing_under_one_percent_raises_no_alarm():
    t = step_times(n=3000)
    t[2000:2015] *= 3  # 15 slow steps: 1% of the run's time
    findings = step_time_check(RunSignals.from_run(timed_run(t)))
    assert all(f.severity == "info" for f in findings)


def rank_run(name, step_ms, host_ms=None, seed=0, n=300, every=10):
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1) * every
    t = step_ms * np.exp(rng.normal(0, 0.05, n))
    scalars = {
        "train/step_time_ms": ScalarSeries.from_lists(steps, t, 1.7e9 + np.cumsum(t) * every / 1000),
        "train/loss": ScalarSeries.from_lists(steps, 2 * np.exp(-steps / 1000) + 0.3),
    }
    if host_ms is not None:
        scalars["train/host_time_ms"] = ScalarSeries.from_lists(steps, host_ms * np.exp(rng.normal(0, 0.3, n)))
    return RunData(name, scalars=scalars)


def test_in_a_synchronous_job_the_straggler_is_named_by_its_host_time():
    # every rank's step time is the same (all wait at the collective); rank 2 loads data slowly
    runs = [rank_run(f"job/rank_{r}", 100.0, host_ms=30.0 if r == 2 else 2.0, seed=r) for r in range(4)]
    found = rank_check({r.name: RunSignals.from_run(r) for r in runs})
    assert list(found) == ["job/rank_2"]
    (finding,) = found["job/rank_2"]
    assert finding.evidence["measure"] == "host_time" and finding.tag == "train/host_time_ms"
    assert 0.2 < finding.evidence["lost_share"] < 0.35


def test_host_time_differences_too_small_to_cost_anything_are_not_a_straggler():
    # rank 1 spends 3x the host time of rank 0, but that is 2% of the step
    runs = [rank_run("job/rank_0", 100.0, host_ms=1.0, seed=0), rank_run("job/rank_1", 100.0, host_ms=3.0, seed=1)]
    assert rank_check({r.name: RunSignals.from_run(r) for r in runs}) == {}


def test_without_time_tags_the_wall_time_between_logged_steps_names_the_slow_rank():
    runs = []
    for rank in range(3):
        steps = np.arange(1, 301) * 10
        ms = 150.0 if rank == 1 else 100.0
        wall = 1.7e9 + steps * ms / 1000
        runs.append(RunData(f"job/rank_{rank}", scalars={"loss": ScalarSeries.from_lists(steps, 1 / np.sqrt(steps), wall)}))
    found = rank_check({r.name: RunSignals.from_run(r) for r in runs})
    assert list(found) == ["job/rank_1"] and found["job/rank_1"][0].evidence["measure"] == "wall_time"


def test_a_samples_axis_tag_never_times_the_steps():
    """MindFormers' `loss vs samples` carries sample counts as its steps: dividing wall time by
    them would make every step 32x faster than it was."""
    from tb_health_plugin.analysis.checks.throughput import _wall_ms_per_step

    samples = np.arange(1, 101) * 32
    wall = 1.7e9 + np.arange(100) * 0.1
    data = RunData("mf", scalars={"loss vs samples": ScalarSeries.from_lists(samples, np.ones(100), wall)})
    assert _wall_ms_per_step(RunSignals.from_run(data)) is None
