"""`tb-health check` end to end on real event files: report, strict JSON, exit codes, overrides."""

from __future__ import annotations

import json
import os
import re
import signal
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


def test_lang_writes_the_findings_in_chinese_and_the_report_says_so(logdir, capsys, monkeypatch):
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")  # --lang wins over the locale
    code, out, _ = run_check(capsys, str(logdir), "--format", "json", "--lang", "zh")
    report = json.loads(out)
    assert code == 1 and report["language"] == "zh"
    spike = next(f for r in report["runs"] for f in r["findings"] if f["kind"] == "loss_spike")
    assert spike["message"].startswith("损失在第 5010 步跳升") and "5000" in spike["message"]
    english = json.loads(run_check(capsys, str(logdir), "--format", "json", "--lang", "en")[1])
    assert english["language"] == "en"
    assert [(f["kind"], f["step"]) for r in english["runs"] for f in r["findings"]] == [
        (f["kind"], f["step"]) for r in report["runs"] for f in r["findings"]
    ]


@pytest.mark.parametrize("environ, language", [({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "C.UTF-8"}, "en")])
def test_the_language_defaults_to_the_locale(logdir, capsys, monkeypatch, environ, language):
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    report = json.loads(run_check(capsys, str(logdir), "--format", "json")[1])
    assert report["language"] == language


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


# ----- hostile and unlucky inputs: one line on stderr, a documented exit code, never a traceback


def console(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kwargs,
    )


def test_a_reader_gone_before_the_report_exits_141_quietly(logdir):
    """`tb-health check ... | head -1`: the pipe's reader is gone, as after head's first line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = console(str(logdir), stdout=write_end)
    os.close(write_end)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and err == ""


def test_a_full_disk_for_the_report_is_one_line_and_exit_2(logdir):
    with open("/dev/full", "w") as full:
        process = console(str(logdir), "--format", "json", stdout=full)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 2
    assert err == "tb-health check: cannot write the output: No space left on device\n"


def interruptible() -> None:
    """In the child before exec: Ctrl-C's default action. A test run started in the background
    of a non-interactive shell (`cmd &` in a script) ignores SIGINT, its children inherit that,
    and Python then installs no KeyboardInterrupt handler: the command would run to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """The report is far larger than a pipe holds and nobody reads it: once its first line has
    arrived the command is certainly still running (blocked writing the rest) when the
    interrupt comes."""
    steps, y = loss_curve(points=40)
    long_name = "r" * 200
    for index in range(400):  # ~400 verdict lines of ~230 bytes: several pipe buffers
        write_scalars(tmp_path / f"{long_name}_{index:03d}", {"train/loss": (steps, np.exp(y))})
    process = console(str(tmp_path), stdout=subprocess.PIPE, preexec_fn=interruptible)
    assert process.stdout.readline(), "the report started"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and err == "tb-health check: interrupted\n"


def test_a_symlink_loop_named_like_an_event_file_is_one_line_and_exit_2(logdir, capsys):
    (logdir / "loop").mkdir()
    os.symlink("events.out.tfevents.2.b", logdir / "loop" / "events.out.tfevents.2.a")
    os.symlink("events.out.tfevents.2.a", logdir / "loop" / "events.out.tfevents.2.b")
    code, out, err = run_check(capsys, str(logdir))
    assert code == 2
    assert err.splitlines()[:2] == [
        f"tb-health check: skipping unreadable event file {logdir}/loop/events.out.tfevents.2.{name} "
        "(Too many levels of symbolic links)"
        for name in "ab"
    ]
    assert "Traceback" not in err and "2 unreadable paths" in err.splitlines()[-1]
    assert "CRITICAL  job/rank_0" in out, "the readable runs are still reported"
    assert out.splitlines()[-1] == "exit 2 (2 unreadable paths left out)"


def test_an_unlistable_sub_folder_is_reported_not_skipped_silently(logdir, capsys):
    """A folder nested past PATH_MAX cannot be listed by path, by root or anyone else."""
    steps, y = loss_curve()
    write_scalars(logdir / "tmp_source", {"train/loss": (steps, np.exp(y))})
    (source,) = (logdir / "tmp_source").iterdir()
    content = source.read_bytes()
    for path in (source, logdir / "tmp_source"):
        path.unlink() if path.is_file() else path.rmdir()
    fd = os.open(logdir, os.O_RDONLY)
    for _ in range(17):  # 17 x 256 characters > PATH_MAX (4096)
        os.mkdir("d" * 255, dir_fd=fd)
        fd, parent = os.open("d" * 255, os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    file = os.open("events.out.tfevents.1.deep", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
    os.write(file, content)
    os.close(file)
    os.close(fd)
    code, out, err = run_check(capsys, str(logdir))
    assert code == 2
    (warning, summary) = err.splitlines()
    assert warning.startswith(f"tb-health check: skipping unreadable folder {logdir}/ddd")
    assert warning.endswith("(File name too long)") and "1 unreadable path" in summary
    assert "3 runs" in out.splitlines()[0]


def test_an_unreadable_file_and_folder_are_one_line_each(logdir, capsys):
    if os.geteuid() == 0:
        pytest.skip("root can read any file")  # the PATH_MAX and symlink-loop tests cover root
    (event_file,) = (logdir / "spiky").iterdir()
    event_file.chmod(0)
    (logdir / "locked").mkdir(mode=0)
    try:
        code, _, err = run_check(capsys, str(logdir))
    finally:
        event_file.chmod(0o600)
        (logdir / "locked").chmod(0o700)
    assert code == 2 and "Traceback" not in err
    assert f"skipping unreadable event file {event_file} (Permission denied)" in err
    assert f"skipping unreadable folder {logdir}/locked (Permission denied)" in err


def test_a_tag_override_naming_no_tag_is_an_error_not_a_pass(logdir, capsys):
    code, out, err = run_check(capsys, str(logdir), "--tag", "loss=does/not/exist")
    assert (code, out) == (2, "")
    assert err == (
        "tb-health check: --tag loss=does/not/exist: no run has a scalar tag 'does/not/exist'; "
        "the loss checks would be skipped\n"
    )


def test_a_tag_override_some_runs_lack_is_said(logdir, capsys):
    code, _, err = run_check(capsys, str(logdir), "--tag", "loss=train/loss")
    assert code == 1  # job/rank_0 still has its NaN loss checked
    assert "--tag loss=train/loss: 1 of 3 runs lack 'train/loss' (e.g. spiky)" in err


def test_control_characters_in_run_names_cannot_forge_report_lines(logdir, capsys):
    """A run named to clear the screen and print its own HEALTHY verdict for the broken run."""
    forged = "x\x1b[2J\x1b[H\rHEALTHY   job/rank_0  steps 10-8000\nrtl\u202egnp.exe"
    steps, y = loss_curve()
    write_scalars(logdir / forged, {"train/loss": (steps, np.exp(y))})
    code, out, _ = run_check(capsys, str(logdir))
    assert code == 1
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    lines = out.splitlines()
    assert sum(line.startswith("HEALTHY") for line in lines) == 2  # healthy and the forged-name run
    assert not any(line.startswith("HEALTHY   job/rank_0") for line in lines)
    assert "HEALTHY   x\\x1b[2J\\x1b[H\\rHEALTHY   job/rank_0  steps 10-8000\\nrtl\\u202egnp.exe" in out


HAN = re.compile(r"[\u4e00-\u9fff]")


def test_the_text_report_is_written_in_chinese_with_lang_zh(logdir, capsys):
    """The frame (summary, verdicts, spans, counts, finding lines, exit line) comes from the
    catalogue; only names from the logs, kinds and numbers stay as they are."""
    code, out, _ = run_check(capsys, str(logdir), "--lang", "zh")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"tb-health：{logdir} 下有 3 个运行：严重 1 个，警告 1 个，健康 1 个"
    assert lines[-1] == "退出码 1（--fail-on critical）"
    run_lines = [line for line in lines[1:-1] if not line.startswith(" ")]
    assert [line.split()[:2] for line in run_lines] == [["健康", "healthy"], ["严重", "job/rank_0"], ["警告", "spiky"]]
    for line in run_lines:  # the span and the count of alarms, after the run's name
        assert not re.search("[A-Za-z]", line.split(None, 2)[2]) and "第 10-8000 步" in line
    finding_lines = [line for line in lines if line.startswith(" ")]
    assert finding_lines and all(re.match(r"    第 +\d+ 步  (严重|警告|提示) +[a-z_]+ ", line) for line in finding_lines)
    spike_line = next(line for line in finding_lines if "loss_spike" in line)
    assert spike_line.startswith("    第     5010 步  警告") and HAN.search(spike_line.split("loss_spike")[1])


def test_errors_and_reader_lines_are_written_in_chinese_with_lang_zh(logdir, capsys):
    code, _, err = run_check(capsys, str(logdir / "absent"), "--lang", "zh")
    assert code == 2 and err == f"tb-health check: {logdir / 'absent'}：目录不存在\n"
    code, _, err = run_check(capsys, str(logdir), "--tag", "loss", "--lang", "zh")
    assert code == 2 and err == "tb-health check: --tag 的格式应为 ROLE=TAG，收到的是 'loss'\n"
    (logdir / "loop").mkdir()
    os.symlink("events.out.tfevents.2.b", logdir / "loop" / "events.out.tfevents.2.a")
    os.symlink("events.out.tfevents.2.a", logdir / "loop" / "events.out.tfevents.2.b")
    code, out, err = run_check(capsys, str(logdir), "--lang", "zh")
    assert code == 2
    assert err.splitlines() == [
        f"tb-health check: 跳过无法读取的事件文件 {logdir}/loop/events.out.tfevents.2.a (Too many levels of symbolic links)",
        f"tb-health check: 跳过无法读取的事件文件 {logdir}/loop/events.out.tfevents.2.b (Too many levels of symbolic links)",
        f"tb-health check: {logdir} 下有 2 个无法读取的路径未纳入报告（退出码 2）",
    ]
    assert out.splitlines()[-1] == "退出码 2（2 个无法读取的路径未纳入报告）"


def test_every_reader_warning_has_its_line_in_the_catalogue():
    """The readers' warnings are matched by their log format: a new or reworded one must be
    added to `READER_LINES` (an error's own text, logged as `tb-health: %s`, is shown as is)."""
    from tb_health_plugin.commands.messages import READER_LINES
    from tb_health_plugin.i18n.catalogue import messages

    readers = Path(__file__).resolve().parents[1] / "tb_health_plugin" / "readers"
    logged = set()
    for source in readers.glob("*.py"):
        logged |= set(re.findall(r'logger\.warning\(\s*"(tb-health: [^"]*)"', source.read_text()))
    assert logged - {"tb-health: %s"} == set(READER_LINES)
    for message_id, names in READER_LINES.values():
        for lang in ("en", "zh"):
            assert set(re.findall(r"{(\w+)", messages(lang)[message_id])) == set(names), (message_id, lang)


# What must not be imported before it is needed: scipy (a second of imports, analysis only) and
# TensorBoard's TensorFlow stub (with boto3; only for tensors that are not plain scalars).
HEAVY_MODULES = ("scipy", "tensorboard.compat.tensorflow_stub", "boto3")


@pytest.mark.parametrize("entry", [
    "import tb_health_plugin.cli as cli; cli.build_parser()",  # what `tb-health COMMAND --help` runs
    "import tb_health_plugin.worker_host",  # what the tab's worker imports before its first full listing
])
def test_entry_points_import_no_heavy_modules(entry: str) -> None:
    script = (f"import sys; {entry}; "
              f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY_MODULES!r} or m in {HEAVY_MODULES!r}))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]", out.stdout


def test_check_help_imports_no_scipy() -> None:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "tb_health_plugin.cli", "check", "--help"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "--format" in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert not {name for name in imported if name.split(".")[0] == "scipy"}
