"""Triage on runs written by the hooks themselves (`HealthLogger`, its writer, its online analysis):
which ranks are trusted from their online verdict, which are analysed in full and why, and the
job's verdict against the full analysis of every rank."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tb_health_plugin import contract
from tb_health_plugin.analysis import engine, triage
from tb_health_plugin.readers import LogdirReader
from tb_health_plugin.service import HealthService
from tests.browser import HealthTab, browser_page, chromium_path
from tests.tensorboard_server import get_json, running_tensorboard
from trainer_hooks.health_logger import HealthLogger
from trainer_hooks.timing import StepClock

STEPS = 400
NAN_STEP = 300
RANKS = 4


def train_rank(job_dir, rank: int, fault: str = "", **options) -> HealthLogger:
    """One rank's custom training loop logged by the hooks; `fault`: "nan" from `NAN_STEP` on;
    "killed": the rank dies after one online analysis at step 200 (before the NaN), its file closed."""
    rng = np.random.default_rng(rank)
    killed = fault == "killed"
    logger = HealthLogger(log_dir=job_dir, rank=rank, world_size=RANKS,
                          analyze_every=10**9 if killed else 10, **options)
    ticks = iter(np.arange(STEPS + 1) * 0.1)  # 100 ms steps: timing findings must not depend on the machine
    logger.clock = StepClock(now=lambda: float(next(ticks)))
    for step in range(1, STEPS + 1):
        loss = 2.0 * math.exp(-step / 100) + 0.3 + 0.01 * rng.standard_normal()
        if fault in ("nan", "killed") and step >= NAN_STEP:
            loss = float("nan")
        logger.log_step(step, loss, grad_norm=1.0 + 0.05 * rng.standard_normal(), lr=1e-3)
        if killed and step == 200:
            logger.online.analyze_now()
    if killed:
        logger.writer.close()  # no final window, no final online analysis
    else:
        logger.close()
    return logger


def read_job(logdir):
    reader = LogdirReader(logdir)
    reader.refresh()
    return [reader.run(name) for name in reader.run_names()]


def worst(reports) -> str:
    order = ("no_data", "healthy", "warning", "critical")
    return max((r["status"] for r in reports), key=order.index)


@pytest.fixture(scope="module")
def job_logdir(tmp_path_factory):
    """job: rank 0 healthy, rank 1 NaN (reports it online), rank 2 without online analysis,
    rank 3 healthy. job_killed: rank 2 killed before its NaN reached an online analysis."""
    return write_jobs(tmp_path_factory.mktemp("triage"))


def write_jobs(logdir):
    """The two jobs of `job_logdir` written into `logdir` (other triage tests use them too)."""
    for rank, fault in enumerate(("", "nan", "", "")):
        train_rank(logdir / "job", rank, fault, online_analysis=rank != 2)
    for rank, fault in enumerate(("", "", "killed", "")):
        train_rank(logdir / "job_killed", rank, fault)
    return logdir


def test_hooks_write_their_online_verdict_up_to_the_last_step(job_logdir):
    runs = {run.name: run for run in read_job(job_logdir)}
    assert triage.online_verdict(runs["job/rank_3"]) == (STEPS, "healthy")
    assert triage.online_verdict(runs["job/rank_1"]) == (STEPS, "critical")
    assert triage.online_verdict(runs["job/rank_2"]) is None  # online analysis off
    covered, status = triage.online_verdict(runs["job_killed/rank_2"])
    assert (covered, status) == (200, "healthy")  # its last analysis came before the NaN


def test_only_ranks_reporting_nothing_up_to_their_last_step_are_trusted(job_logdir):
    reasons = {run.name: triage.full_analysis_reason(run) for run in read_job(job_logdir)}
    assert reasons == {
        "job/rank_0": "rank_0",
        "job/rank_1": "reported",
        "job/rank_2": "no_online_verdict",
        "job/rank_3": None,
        "job_killed/rank_0": "rank_0",
        "job_killed/rank_1": None,
        "job_killed/rank_2": "stale_online_verdict",
        "job_killed/rank_3": None,
    }


@pytest.mark.parametrize("job", ["job", "job_killed"])
def test_job_verdict_equals_the_full_analysis(job_logdir, job):
    runs = [run for run in read_job(job_logdir) if contract.job_of(run.name) == job]
    full = engine.analyze_runs(runs, lang=None)
    triaged = triage.analyze_unit(runs, lang=None, triage=True)
    assert worst(triaged) == worst(full) == "critical"
    for by_full, by_triage in zip(full, triaged, strict=True):
        if by_triage["analysis"] == triage.FULL:  # analysed in full: the same report
            assert {k: v for k, v in by_triage.items() if not k.startswith("analysis")} == by_full
        else:
            assert by_triage["status"] == by_full["status"] == "healthy"
    # the NaN of the killed rank came after its last online analysis: only the full analysis sees it
    killed = {r["run"]: r for r in triaged}.get("job_killed/rank_2")
    if killed is not None:
        assert killed["analysis"] == triage.FULL and killed["status"] == "critical"


def test_without_triage_the_reports_are_the_engines(job_logdir):
    runs = read_job(job_logdir)
    assert triage.analyze_unit(runs, lang=None, triage=False) == engine.analyze_runs(runs, lang=None)


def test_a_rank_with_histograms_is_analysed_in_full(tmp_path):
    train_rank(tmp_path / "job", 1, histogram_ranks=(1,), histogram_freq=100,
               parameters={"w": np.ones((4, 4), dtype=np.float32)})
    (run,) = read_job(tmp_path)
    assert run.histograms
    assert triage.full_analysis_reason(run) == "histograms"


def test_modes_from_the_environment():
    assert triage.mode_from_environment({}) == "auto"
    assert triage.mode_from_environment({triage.ENV_MODE: "OFF"}) == "off"
    assert triage.mode_from_environment({triage.ENV_MODE: "bogus"}) == "auto"
    assert not triage.enabled("auto", triage.AUTO_MIN_RUNS - 1)
    assert triage.enabled("auto", triage.AUTO_MIN_RUNS) and triage.enabled("on", 1)
    assert not triage.enabled("off", 10**6)


def test_the_overview_says_which_ranks_were_trusted(job_logdir, monkeypatch):
    monkeypatch.setenv(triage.ENV_MODE, "on")
    service = HealthService(str(job_logdir), refresh_interval_s=60)
    try:
        overview = service.overview(budget_s=120)
    finally:
        service.stop()
    runs = {row["run"]: row for row in overview["runs"]}
    assert runs["job/rank_3"]["analysis"] == "online" and "analysis_reason" not in runs["job/rank_3"]
    assert (runs["job/rank_1"]["analysis"], runs["job/rank_1"]["analysis_reason"]) == ("full", "reported")
    jobs = {row["job"]: row for row in overview["jobs"]}
    assert jobs["job_killed"]["status"] == "critical"
    assert jobs["job_killed"]["triage"] == {
        "full": ["job_killed/rank_0", "job_killed/rank_2"],
        "online": ["job_killed/rank_1", "job_killed/rank_3"],
    }


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_tab_says_which_ranks_were_trusted(job_logdir):
    """A real TensorBoard (triage on) and the tab in headless Chromium: the job row counts the ranks
    analysed in full and those trusted; a trusted rank's row carries the online-verdict chip."""
    env = {**os.environ, triage.ENV_MODE: "on"}
    with running_tensorboard(job_logdir, env=env) as base, browser_page() as page:
        get_json(base + "/data/plugin/health/runs", timeout=120)
        tab = HealthTab(page, base).open()
        note = tab.wait_until(
            "w => w.document.querySelector(`tr.job-row[data-job='job_killed'] .triage-note`)?.textContent"
        )
        assert "2 analysed in full, 2 trusted from their online verdict" in note
        chips = tab.eval("""w => Object.fromEntries([...w.document.querySelectorAll('tr.run-row')].map(
            r => [r.dataset.run, !!r.querySelector('.online-verdict')]))""")
        assert chips == {
            "job/rank_0": False, "job/rank_1": False, "job/rank_2": False, "job/rank_3": True,
            "job_killed/rank_0": False, "job_killed/rank_1": True, "job_killed/rank_2": False,
            "job_killed/rank_3": True,
        }
