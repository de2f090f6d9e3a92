"""The demo (`python -m tb_health_demo`) trains real runs whose problems `tb-health check` finds, each on the right run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tb_health_demo.scenarios import SCENARIOS

ALARMS = {"warning", "critical"}


@pytest.fixture(scope="module")
def demo_logdir(demo_training):
    assert "[6/6] two_ranks" in demo_training.stderr  # progress was shown
    return demo_training.logdir


@pytest.fixture(scope="module")
def report(demo_logdir):
    result = subprocess.run(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", str(demo_logdir), "--format", "json"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def measures_the_machine(finding: dict) -> bool:
    """A slowdown within one run: on a shared machine it measures the neighbours' load as much as
    the run, so no expectation of the demo rests on it (its own tests cover the detector)."""
    return finding["kind"] == "throughput" and finding["evidence"].get("what") == "regression"


@pytest.mark.mindspore
def test_every_demo_problem_is_flagged_on_its_run_and_healthy_runs_stay_quiet(report):
    alarms = {
        run["run"]: {
            f["kind"] for f in run["findings"] if f["severity"] in ALARMS and not measures_the_machine(f)
        }
        for run in report["runs"]
    }
    expected = {
        f"{scenario.name}/rank_{rank}": scenario.expected_for(rank)
        for scenario in SCENARIOS
        for rank in range(scenario.world_size)
    }
    assert set(alarms) == set(expected)
    for run, kinds in expected.items():
        if kinds:
            assert kinds <= alarms[run], f"{run}: expected {sorted(kinds)}, found {sorted(alarms[run])}"
        else:
            assert not alarms[run], f"{run} is healthy but was flagged: {sorted(alarms[run])}"


@pytest.mark.mindspore
def test_the_straggler_is_named_by_its_host_time(report):
    run = next(r for r in report["runs"] if r["run"] == "two_ranks/rank_1")
    slow = [f for f in run["findings"] if f["kind"] == "throughput" and f["evidence"].get("what") == "slow_rank"]
    assert [(f["severity"], f["evidence"]["measure"], f["tag"]) for f in slow] == [
        ("warning", "host_time", "train/host_time_ms")
    ]


@pytest.mark.mindspore
def test_the_corrupted_batch_is_blamed_on_the_batch_not_the_learning_rate(report):
    run = next(r for r in report["runs"] if r["run"] == "corrupted_batch/rank_0")
    causes = [f["evidence"].get("cause") for f in run["findings"] if f["kind"] == "loss_spike"]
    assert causes and all(cause == "bad_batch" for cause in causes), causes


@pytest.mark.mindspore
def test_demo_runs_carry_the_hooks_signals(report, demo_logdir):
    from tb_health_plugin.readers import read_logdir

    runs = {r.name: r for r in read_logdir(demo_logdir)}
    healthy = runs["healthy_transformer/rank_0"]
    for tag in (
        "train/loss",
        "train/lr",
        "train/grad_norm",
        "train/loss_max",
        "train/step_time_ms",
        "train/throughput",
        "train/host_time_ms",
    ):
        assert len(healthy.scalars[tag]) >= 100, tag
    assert any(t.startswith("grad_norm/") for t in healthy.scalars)
    assert any(t.startswith("weight/") for t in healthy.histograms)


@pytest.mark.mindspore
@pytest.mark.browser
def test_health_tab_on_the_demo_shows_every_verdict_and_the_corrupted_batch(demo_logdir):
    """The screenshots the README shows (`scripts/refresh-screenshots` copies them to docs/)."""
    from tests.browser import HealthTab, browser_page, chromium_path
    from tests.tensorboard_server import running_tensorboard
    from tests.test_tab_browser import open_run, overview_runs

    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (./scripts/test installs it as root)")
    with running_tensorboard(demo_logdir) as base, browser_page() as page:
        tab = HealthTab(page, base).open()
        runs = overview_runs(tab)
        assert "two_ranks/rank_1" in runs and "deep_sigmoid/rank_0" in runs
        statuses = tab.eval(
            "w => Object.fromEntries([...w.document.querySelectorAll('tr.run-row')].map(r => [r.dataset.run, r.textContent]))"
        )
        assert "critical" in statuses["deep_sigmoid/rank_0"].lower()
        assert "healthy" in statuses["healthy_transformer/rank_0"].lower()
        tab.screenshot("demo-overview")
        open_run(tab, "corrupted_batch/rank_0")
        tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
        assert "spike" in tab.eval("w => w.document.body.innerText").lower()
        tab.screenshot("demo-run-view")
