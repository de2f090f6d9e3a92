"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class DemoTraining:
    logdir: Path
    stderr: str


@pytest.fixture(scope="session")
def demo_training(tmp_path_factory) -> DemoTraining:
    """`python -m tb_health_demo --no-serve` once for the session (it trains real MindSpore runs on the CPU,
    a few minutes): the demo test checks its report, the screenshot test photographs its tab.

    Run as a user's shell runs it: without the protobuf setting that importing MindSpore put into
    this test process's environment.
    """
    logdir = tmp_path_factory.mktemp("demo") / "logs"
    workdir = tmp_path_factory.mktemp("demo-cwd")
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    result = subprocess.run(
        [sys.executable, "-m", "tb_health_demo", "--no-serve", "--logdir", str(logdir)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return DemoTraining(logdir, result.stderr)
