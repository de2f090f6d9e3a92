"""`tb-health check --jobs N`: the runs read and analysed in worker processes give the same report,
the same warnings and the same exit code as in one process, and a dying worker loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.detection.events import write_scalars
from tb_health_plugin.commands import check_workers
from tb_health_plugin.commands.check_workers import RunWorkers
from tb_health_plugin.readers.logdir_reader import read_logdir

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def mixed_logdir(tmp_path: Path) -> Path:
    """Healthy, spiking, diverging and NaN runs, a two-rank job with a slow rank, and an unreadable file."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 601) * 10
    base = 0.5 + 3.0 * (1 + steps / 300.0) ** -0.7
    for index in range(4):
        noisy = base * np.exp(0.03 * rng.standard_normal(steps.size))
        write_scalars(tmp_path / f"healthy_{index}", {"train/loss": (steps, noisy), "train/lr": (steps, np.full(steps.size, 1e-3))})
    spiky = base * np.exp(0.03 * rng.standard_normal(steps.size))
    spiky[300] *= 6.0
    write_scalars(tmp_path / "spiky", {"loss": (steps, spiky)})
    diverging = base.copy()
    diverging[400:] *= np.exp(np.linspace(0, 6, steps.size - 400))
    write_scalars(tmp_path / "diverging", {"train/loss": (steps, diverging)})
    broken = base.copy()
    broken[450:] = np.nan
    write_scalars(tmp_path / "nan_run", {"train/loss": (steps, broken)})
    for rank, slow in ((0, 1.0), (1, 2.5)):
        times = np.full(steps.size, 0.1) * np.where(steps > 3000, slow, 1.0)
        write_scalars(tmp_path / "job" / f"rank_{rank}", {"train/loss": (steps, base), "perf/step_time": (steps, times)})
    (tmp_path / "loop").mkdir()  # a file that cannot be read: one warning and exit 2 either way
    os.symlink("events.out.tfevents.2.b", tmp_path / "loop" / "events.out.tfevents.2.a")
    os.symlink("events.out.tfevents.2.a", tmp_path / "loop" / "events.out.tfevents.2.b")
    return tmp_path


def check(logdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("form", ["text", "json"])
def test_workers_give_the_report_warnings_and_exit_code_of_one_process(mixed_logdir, form):
    alone = check(mixed_logdir, "--format", form, "--jobs", "1")
    shared = check(mixed_logdir, "--format", form, "--jobs", "3")
    assert alone.returncode == 2, alone.stderr  # the unreadable file
    assert "skipping unreadable event file" in alone.stderr and "critical" in alone.stdout.lower()
    assert (shared.returncode, shared.stdout, shared.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_jobs_must_be_a_positive_count(mixed_logdir):
    result = check(mixed_logdir, "--jobs", "0")
    assert result.returncode == 2 and "--jobs" in result.stderr


def _dies_in_a_worker(run, overrides, parent=os.getpid()):
    if os.getpid() != parent:
        os._exit(9)  # as the kernel's OOM killer would end it
    return [run.name]


def test_a_dying_worker_loses_nothing(mixed_logdir, monkeypatch):
    runs = [run for run in read_logdir(mixed_logdir) if run.scalars]
    monkeypatch.setattr(check_workers, "_own_findings", _dies_in_a_worker)  # forked workers inherit it
    done = []
    with RunWorkers(2) as workers:
        findings = workers.findings(runs, None, on_progress=lambda count, total: done.append((count, total)))
    assert findings == {run.name: [run.name] for run in runs}  # computed again in this process
    assert done[-1] == (len(runs), len(runs))


def test_ctrl_c_while_workers_analyse_is_one_line_and_exit_130(tmp_path):
    """Workers ignore SIGINT; the command stops, cancels what is queued and says so once."""
    rng = np.random.default_rng(5)
    steps = np.arange(1, 20_001)
    for index in range(24):  # seconds of analysis on 2 cores: the interrupt comes during it
        loss = (0.5 + 3.0 * (1 + steps / 300.0) ** -0.7) * np.exp(0.05 * rng.standard_normal(steps.size))
        write_scalars(tmp_path / f"run_{index:02d}", {"train/loss": (steps, loss)})
    process = subprocess.Popen(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", str(tmp_path), "--jobs", "2", "--progress", "always"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in process.stderr:  # "read N runs ...": the workers are analysing now
        lines.append(line)
        if line.startswith("tb-health: read 24 runs"):
            break
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=300)  # a hang detector, not a timing claim
    assert process.returncode == 130, "".join(lines) + rest
    assert rest.splitlines()[-1] == "tb-health check: interrupted" and "Traceback" not in rest
    assert "analysed 24/24 runs" not in rest


def _sleep_long(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_ctrl_c_stops_the_workers_at_once_and_leaves_no_thread_waiting_on_them():
    """A SIGINT while the pool works is raised between waits, the workers are terminated, and the
    executor's manager thread (which the interpreter joins at exit) ends without their tasks."""
    import threading
    import time

    managers = []

    def interrupt_soon(workers):
        deadline = time.monotonic() + 20
        while signal.getsignal(signal.SIGINT) is signal.default_int_handler and time.monotonic() < deadline:
            time.sleep(0.05)  # until the pool's handler is in place: then the tasks are submitted
        time.sleep(0.3)
        managers.append(workers._pool._executor_manager_thread)  # shutdown() forgets it
        os.kill(os.getpid(), signal.SIGINT)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with check_workers.RunWorkers(2) as workers:
            threading.Thread(target=interrupt_soon, args=(workers,), daemon=True).start()
            workers._map(_sleep_long, [(60.0,)] * 4)
    (manager,) = managers
    manager.join(timeout=20)
    assert not manager.is_alive()  # the tasks it ran would have kept it 60 s
    assert time.monotonic() - started < 30
