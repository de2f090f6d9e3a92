"""Step-time regressions within a run and ranks that lag or depart from their job."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.throughput import rank_check, step_time_check
from tb_health_plugin.analysis.detectors.throughput import (
    rank_loss_departures,
    rank_step_time_outliers,
    step_time_regression,
)
from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.series import RunData, ScalarSeries


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
    assert slowdown is not None and 895 <= slowdown.index <= 905
    assert slowdown.severity == "warning" and 1.5 < slowdown.ratio < 1.7


def test_a_slowdown_that_halves_the_speed_is_critical():
    t = step_times()
    t[500:] *= 2.5
    assert step_time_regression(t).severity == "critical"


def test_a_gradual_drift_is_found():
    # a 1.8x ramp: either the best split already shows 1.25x or the ends are compared
    t = step_times() * np.linspace(1, 1.8, 1500)
    slowdown = step_time_regression(t)
    assert slowdown is not None and slowdown.ratio >= 1.25


def test_throughput_alone_is_checked_as_time_per_sample():
    t = step_times()
    t[700:] *= 2
    steps = np.arange(t.size) * 10
    data = RunData("run", scalars={"throughput": ScalarSeries.from_lists(steps, 64 / (t / 1000))})
    findings = step_time_check(RunSignals.from_run(data))
    assert len(findings) == 1 and findings[0].kind == "throughput" and findings[0].severity == "critical"
    assert "samples/s" in findings[0].message and 6990 <= findings[0].step <= 7010


def test_the_slow_rank_is_the_outlier_and_similar_fast_ranks_are_not():
    assert rank_step_time_outliers({"r0": 100, "r1": 103, "r2": 97, "r3": 101}) == {}
    found = rank_step_time_outliers({"r0": 100, "r1": 103, "r2": 140, "r3": 101})
    assert list(found) == ["r2"] and found["r2"]["slowdown"] > 1.3


def test_a_rank_whose_loss_departs_is_found_from_where_it_departs():
    rng = np.random.default_rng(1)
    steps = np.arange(400)
    curve = 3 * np.exp(-steps / 150) + 0.5
    losses = {f"r{i}": curve * np.exp(rng.normal(0, 0.03, 400)) for i in range(5)}
    assert rank_loss_departures(steps, losses) == {}
    losses["r3"] = losses["r3"].copy()
    losses["r3"][250:] *= 2
    found = rank_loss_departures(steps, losses)
    assert list(found) == ["r3"] and 248 <= found["r3"][0] <= 252


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
