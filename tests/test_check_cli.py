"""`tb-health check` end to end on real event files: report, strict JSON, exit codes, overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.detection.events import write_scalars
from tb_health_plugin.cli import main

ROOT = Path(__file__).resolve().parents[1]


def loss_curve(points: int = 800, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, points + 1) * 10
    return steps, np.log(0.5 + 3.0 * (1 + steps / 300.0) ** -0.7) + 0.02 * rng.standard_normal(points)


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    steps, y = loss_curve()
    write_scalars(tmp_path / "healthy", {"train/loss": (steps, np.exp(y)), "train/lr": (steps, np.full(steps.size, 1e-3))})
    spiky = y.copy()
    spiky[500] += np.log(5.0)
    write_scalars(tmp_path / "spiky", {"loss": (steps, np.exp(spiky))})
    broken = np.exp(y)
    broken[600:] = np.nan
    write_scalars(tmp_path / "job" / "rank_0", {"train/loss": (steps, broken)})
    return tmp_path


def run_check(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_report_has_one_verdict_line_per_run_then_its_findings(logdir, capsys):
    code, out, _ = run_check(capsys, str(logdir))
    assert code == 1  # a critical finding and --fail-on critical by default
    lines = out.splitlines()
    assert lines[0].startswith("tb-health: 3 runs under") and "1 critical, 1 warning, 1 healthy" in lines[0]
    verdicts = [line.split()[:2] for line in lines if not line.startswith((" ", "tb-health", "exit"))]
    assert verdicts == [["HEALTHY", "healthy"], ["CRITICAL", "job/rank_0"], ["WARNING", "spiky"]]
    spike_line = next(line for line in lines if "loss_spike" in line)
    assert "step     5010" in spike_line and "5000" in spike_line  # its step and the last healthy one
    assert lines[-1] == "exit 1 (--fail-on critical)"


def test_json_report_is_strict_and_follows_the_contract(logdir, capsys):
    code, out, err = run_check(capsys, str(logdir), "--format", "json", "--progress", "always")
    assert code == 1
    report = json.loads(out, parse_constant=lambda name: pytest.fail(f"non-strict JSON literal {name}"))
    assert report["version"] == 1 and report["logdir"] == str(logdir)
    statuses = {r["run"]: r["status"] for r in report["runs"]}
    assert statuses == {"healthy": "healthy", "spiky": "warning", "job/rank_0": "critical"}
    assert "tb-health: read 3 runs" in err  # progress goes to stderr, stdout stays parseable


@pytest.mark.parametrize("fail_on, expected", [("critical", 1), ("warning", 1)])
def test_fail_on_sets_the_exit_code(logdir, capsys, fail_on, expected):
    assert run_check(capsys, str(logdir), "--fail-on", fail_on)[0] == expected


def test_warnings_fail_only_with_fail_on_warning(tmp_path, capsys):
    steps, y = loss_curve()
    y[500] += np.log(5.0)
    write_scalars(tmp_path / "spiky", {"loss": (steps, np.exp(y))})
    assert run_check(capsys, str(tmp_path))[0] == 0
    assert run_check(capsys, str(tmp_path), "--fail-on", "warning")[0] == 1


def test_tag_override_analyses_a_custom_loss_tag(tmp_path, capsys):
    steps, y = loss_curve()
    y[500] += np.log(5.0)
    write_scalars(tmp_path / "custom", {"objective/total": (steps, np.exp(y))})
    _, out, _ = run_check(capsys, str(tmp_path), "--format", "json")
    assert json.loads(out)["runs"][0]["findings"] == []
    _, out, _ = run_check(capsys, str(tmp_path), "--format", "json", "--tag", "loss=objective/total")
    findings = json.loads(out)["runs"][0]["findings"]
    assert [(f["kind"], f["tag"], f["step"]) for f in findings] == [("loss_spike", "objective/total", 5010)]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["{missing}"], "no such directory"),
        (["{file}"], "not a directory"),
        (["{empty}"], "no event files"),
        (["{empty}", "--tag", "loss"], "expects ROLE=TAG"),
        (["{empty}", "--tag", "lossy=x"], "unknown role"),
    ],
)
def test_usage_errors_and_unusable_logdirs_exit_2(tmp_path, capsys, arguments, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a logdir")
    paths = {"missing": tmp_path / "nope", "file": tmp_path / "file", "empty": tmp_path / "empty"}
    code, out, err = run_check(capsys, *[a.format(**paths) for a in arguments])
    assert code == 2 and out == "" and message in err


def test_unreadable_logdir_exits_2(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root can read any directory")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        assert run_check(capsys, str(locked))[0] == 2
    finally:
        locked.chmod(0o700)


def test_console_command_exit_code_and_clean_stdout(logdir):
    result = subprocess.run(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir), "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["runs"]
