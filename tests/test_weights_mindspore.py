"""A real MindSpore CPU training through the hooks: a bias's large update ratio is no finding.

The update-ratio rule of thumb (a step moves a weight by about 1e-3 of its norm) is a weight
matrix's. A bias starts at zero and its norm stays small, so the same update is a large share
of it: a sigmoid MLP under Momentum at 1.5 moves its output bias by about a third of its norm
each step while every matrix moves by 0.5-2%, and the run learns. Zoo runs of the sealed seed
61591 had that as their only `weight_updates` finding (output biases at 0.18 and 0.35).
"""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402

from tb_health_plugin.analysis.checks.weights import weights_check  # noqa: E402
from tb_health_plugin.analysis.detectors.update_ratio import large_updates  # noqa: E402
from tb_health_plugin.analysis.signals import RunSignals  # noqa: E402
from tb_health_plugin.readers import read_logdir  # noqa: E402
from tests.hooks_fixtures import teacher_batches, train_classifier_with_hooks  # noqa: E402

pytestmark = pytest.mark.mindspore


def train_sigmoid_mlp(log_dir, seed: int = 0, steps: int = 300, batch: int = 8, lr: float = 1.5) -> None:
    ms.set_seed(seed)
    rng = np.random.default_rng(seed)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.Sigmoid(), nn.Dense(32, 32), nn.Sigmoid(), nn.Dense(32, 8))
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    batches = teacher_batches(rng, steps, batch, features=16, classes=8, noise=1.0)
    train_classifier_with_hooks(log_dir, net, optimizer, batches, batch, collect_freq=5)


def test_a_bias_that_moves_a_third_of_its_small_norm_each_step_is_no_weight_finding(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd
    train_sigmoid_mlp(tmp_path / "run")
    signals = RunSignals.from_run(read_logdir(str(tmp_path / "run"))[0])
    ratios = signals.param_update_ratios
    bias = ratios["4.bias"]
    assert large_updates(bias.values, bias.steps) is not None  # the bias alone would be "too large"
    assert all(np.median(ratios[p].values[2:]) < 0.05 for p in ratios if p.endswith("weight"))
    assert [f for f in weights_check(signals) if f.evidence.get("what") == "large_updates"] == []
