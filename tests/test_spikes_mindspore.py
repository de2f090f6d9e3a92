"""A real MindSpore CPU training logged through our hooks: a healthy run raises no loss spike.

A small MLP trained with Adam at lr=1e-3 on minibatches of 16: the per-step loss scatters, and
the window maximum `train/loss_max` of ten such steps stands well above the loss trend. That is
what the maximum of ten noisy steps normally reaches, not a spike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402

from tests.hooks_fixtures import teacher_batches, train_classifier_with_hooks  # noqa: E402

pytestmark = pytest.mark.mindspore
REPO = Path(__file__).resolve().parents[1]


def train_small_mlp(log_dir: Path, seed: int, steps: int = 300, batch: int = 16) -> None:
    ms.set_seed(seed)
    rng = np.random.default_rng(seed)
    net = nn.SequentialCell(nn.Dense(20, 64), nn.ReLU(), nn.Dense(64, 4))
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    batches = teacher_batches(rng, steps, batch, features=20, classes=4, noise=0.5)
    train_classifier_with_hooks(log_dir, net, optimizer, batches, batch, collect_freq=10)


def test_a_healthy_adam_mlp_logged_through_the_hooks_has_no_loss_spike(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd
    for seed in (0, 1):
        train_small_mlp(tmp_path / "runs" / f"mlp_{seed}", seed)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", "check", str(tmp_path / "runs"),
                             "--format", "json"], capture_output=True, text=True, env=env, check=False)
    runs = json.loads(result.stdout)["runs"]
    assert len(runs) == 2
    for run in runs:
        spikes = [f for f in run["findings"] if f["kind"] == "loss_spike" and f["severity"] in ("warning", "critical")]
        assert spikes == [], (run["run"], spikes)
