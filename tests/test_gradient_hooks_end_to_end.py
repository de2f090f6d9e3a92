"""From our hooks to a finding: deep nets trained with `HealthMonitor`, logs read back and analysed.

The training runs in a subprocess from a scratch folder (MindSpore writes `rank_0/` there and
its protobuf modules cannot share a process with TensorBoard's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.readers import read_logdir

REPO = Path(__file__).resolve().parents[1]
TRAINING = r"""
import sys
import numpy as np
import mindspore as ms
from mindspore import dataset as ds, nn
from mindspore.common.initializer import Normal
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
root = sys.argv[1]
for name, activation, depth, sigma, lr in (("sigmoid_deep", nn.Sigmoid, 10, 0.1, 0.1), ("relu", nn.ReLU, 5, 0.25, 0.02)):
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1600, 16)).astype(np.float32)
    y = np.sin(x @ rng.normal(size=(16, 1)) / 4).astype(np.float32)
    cells = []
    for i in range(depth):
        cells += [nn.Dense(32 if i else 16, 32, weight_init=Normal(sigma)), activation()]
    net = nn.SequentialCell(cells + [nn.Dense(32, 1, weight_init=Normal(sigma))])
    optimizer = nn.SGD(net.trainable_params(), lr)
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(16)
    monitor = HealthMonitor(f"{root}/{name}", collect_freq=2, weight_freq=4, histogram_freq=10, online_analysis=False)
    model.train(1, data, callbacks=[monitor], dataset_sink_mode=False)
"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("hooks_logs")
    scratch = tmp_path_factory.mktemp("scratch")
    env = dict(os.environ, PYTHONPATH=str(REPO), PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    done = subprocess.run(
        [sys.executable, "-c", TRAINING, str(logdir)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["run"]: r for r in analyze_runs(read_logdir(logdir))}


def alarms(report) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] != "info"]


@pytest.mark.mindspore
def test_the_hooks_per_parameter_norms_reveal_vanishing_gradients(reports):
    found = [f for f in alarms(reports["sigmoid_deep/rank_0"]) if f["kind"] == "vanishing_gradients"]
    assert found, reports["sigmoid_deep/rank_0"]["findings"]
    assert found[0]["tag"] == "grad_norm/0.weight" and found[0]["step"] <= 2


@pytest.mark.mindspore
def test_a_healthy_run_logged_by_the_hooks_raises_no_gradient_weight_or_schedule_alarm(reports):
    mine = {
        "vanishing_gradients",
        "exploding_gradients",
        "weight_updates",
        "weight_distribution",
        "lr_schedule",
        "loss_scale",
        "throughput",
    }
    report = reports["relu/rank_0"]
    assert not [f for f in alarms(report) if f["kind"] in mine], report["findings"]
