"""The engine's contract: report shape, strict JSON, role overrides, failing checks isolated."""

from __future__ import annotations

import json

import numpy as np

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.analysis.kinds import run_checks as registered_checks
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.contract import KINDS
from tb_health_plugin.run_data import RunData, ScalarSeries


def loss_run(name: str, tag: str = "train/loss", spike: bool = False, nan_from: int | None = None) -> RunData:
    rng = np.random.default_rng(len(name))
    steps = np.arange(1, 1201) * 10
    y = np.log(0.5 + 3.0 * (1 + steps / 300.0) ** -0.7) + 0.02 * rng.standard_normal(steps.size)
    if spike:
        y[800] += np.log(4.0)
    values = np.exp(y)
    if nan_from is not None:
        values[nan_from:] = np.nan
    return RunData(name, {tag: ScalarSeries.from_lists(steps, values)})


def strict_json(report) -> str:
    return json.dumps(report, allow_nan=False)


def test_report_follows_the_contract_for_healthy_spiky_diverged_and_empty_runs():
    runs = [loss_run("a"), loss_run("b", spike=True), loss_run("c/rank_0", nan_from=900), RunData("empty")]
    reports = engine.analyze_runs(runs)
    by_run = {r["run"]: r for r in reports}
    assert [r["run"] for r in reports] == ["a", "b", "c/rank_0", "empty"]
    assert by_run["a"]["status"] == "healthy" and by_run["a"]["findings"] == []
    assert by_run["a"]["steps"] == {"first": 10, "last": 12000}
    assert by_run["b"]["status"] == "warning"
    assert [f["kind"] for f in by_run["b"]["findings"]] == ["loss_spike"]
    assert by_run["b"]["findings"][0]["step"] == 8010
    assert by_run["c/rank_0"]["status"] == "critical"
    assert {f["kind"] for f in by_run["c/rank_0"]["findings"]} == {"nonfinite", "divergence"}
    assert by_run["empty"] == {"run": "empty", "status": "no_data", "steps": None, "findings": []}
    document = engine.logdir_report("logs", reports)
    assert document["version"] == 1 and document["logdir"] == "logs"
    parsed = json.loads(strict_json(document))
    for run in parsed["runs"]:
        for finding in run["findings"]:
            assert {"kind", "severity", "step", "tag", "message", "evidence"} <= set(finding)
            assert finding["kind"] in KINDS and finding["message"].endswith(".")


def test_loss_spellings_of_other_tools_need_no_configuration():
    for tag in ("loss", "train_loss", "loss/auto", "lm-loss", "Loss/train"):
        report = engine.analyze_run(loss_run("r", tag=tag, spike=True))
        assert [f["tag"] for f in report["findings"]] == [tag]


def test_a_role_override_picks_the_users_tag():
    run = loss_run("r", tag="my/loss", spike=True)
    assert engine.analyze_run(run)["findings"] == []
    report = engine.analyze_run(run, overrides={"loss": "my/loss"})
    assert [(f["kind"], f["tag"]) for f in report["findings"]] == [("loss_spike", "my/loss")]


def test_a_failing_check_becomes_info_and_hides_nothing_else(monkeypatch):
    def broken(signals):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "run_checks", lambda: [broken, *registered_checks()])
    report = engine.analyze_run(loss_run("b", spike=True))
    kinds = [(f["kind"], f["severity"]) for f in report["findings"]]
    assert ("check_error", "info") in kinds and ("loss_spike", "warning") in kinds
    assert report["status"] == "warning"


def test_info_findings_never_make_a_run_unhealthy(monkeypatch):
    def context(signals):
        shape = {"shape": Phrase("lr_schedule.name.cosine")}
        return [Event("lr_schedule", "info", 0, "lr", "lr_schedule.shape", {"peak_lr": 1.0, "floor_lr": 0.0}, args=shape)]

    monkeypatch.setattr(engine, "run_checks", lambda: [context])
    assert engine.analyze_run(loss_run("a"))["status"] == "healthy"


def test_non_finite_evidence_is_written_as_strings_in_strict_json():
    evidence = {"windows": 2, "peak": float("inf"), "z": np.float32("nan")}
    finding = Event("nonfinite", "critical", 5, "train/nonfinite_count", "nonfinite.counts", evidence)
    assert json.loads(strict_json(render_finding(finding, "en")))["evidence"] == {"windows": 2, "peak": "inf", "z": "nan"}


def test_analysis_work_grows_linearly_with_points():
    """Counted, not timed: the Python calls the analysis makes (a per-point loop would multiply
    them by 8) and the memory it peaks at (a pairwise step would need 8**2 = 64 times more)."""
    import cProfile
    import pstats
    import tracemalloc

    def work(points: int) -> tuple[int, int]:
        rng = np.random.default_rng(0)
        steps = np.arange(1, points + 1)
        values = np.exp(np.log(1.0 + 3.0 / np.sqrt(steps)) + 0.03 * rng.standard_normal(points))
        run = RunData("r", {"train/loss": ScalarSeries.from_lists(steps, values)})
        engine.analyze_run(run)  # imports and caches warmed up
        profile = cProfile.Profile()
        profile.runcall(engine.analyze_run, run)
        tracemalloc.start()
        try:
            engine.analyze_run(run)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return pstats.Stats(profile).total_calls, peak

    (small_calls, small_peak), (large_calls, large_peak) = work(20_000), work(160_000)
    # 8x the points, far fewer than 8x the calls: vectorised. The running medians work in blocks of
    # `robust.BLOCK_POINTS` (memory), a few dozen calls per block: 3 blocks against 1 here.
    assert large_calls < 2 * small_calls
    assert large_peak < 8 * small_peak * 1.5  # memory proportional to the points
