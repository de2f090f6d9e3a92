"""Train every demo scenario into one logdir, one process per run, with progress on stderr.

Runs train one after another so that their step times stay comparable (the throughput checks
would otherwise see the machine's contention); the ranks of one job train together, as a real
data-parallel job does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tb_health_demo.scenarios import SCENARIOS, Scenario


class DemoTrainingFailed(RuntimeError):
    pass


def _start(scenario: Scenario, rank: int, logdir: Path, workdir: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "tb_health_demo.train", scenario.name, str(logdir), "--rank", str(rank)]
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    # MindSpore and MindFormers drop rank_0/, output/ and kernel caches into the working directory.
    return subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _status(index: int, total: int, scenario: Scenario, step: int, started: float, tty: bool) -> None:
    line = f"[{index}/{total}] {scenario.name:<20} step {step:>4}/{scenario.steps}  {time.monotonic() - started:5.1f}s"
    if tty:
        sys.stderr.write("\r" + line)
    elif step == scenario.steps:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def train_scenario(scenario: Scenario, logdir: Path, index: int, total: int, workdir: Path) -> None:
    tty = sys.stderr.isatty()
    started = time.monotonic()
    processes = [_start(scenario, rank, logdir, workdir) for rank in range(scenario.world_size)]
    leader = processes[0]
    assert leader.stdout is not None
    for line in leader.stdout:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "progress":
            _status(index, total, scenario, int(parts[1]), started, tty)
    failures = []
    for rank, process in enumerate(processes):
        _, stderr = process.communicate()
        if process.returncode != 0:
            failures.append(f"rank {rank} exited with {process.returncode}:\n{stderr[-2000:]}")
    if tty:
        sys.stderr.write("\n")
    if failures:
        raise DemoTrainingFailed(f"demo run {scenario.name} failed: " + "\n".join(failures))


def train_all(logdir: Path, scenarios: Sequence[Scenario] = SCENARIOS) -> None:
    logdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tb-health-demo-") as workdir:
        for index, scenario in enumerate(scenarios, start=1):
            train_scenario(scenario, logdir, index, len(scenarios), Path(workdir))
