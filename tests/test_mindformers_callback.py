"""The MindFormers callback, built by MindFormers' own `build_callback` from a YAML `callbacks:`
entry, logging what `MFTrainOneStepCell` returns during a real CPU training."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
pytest.importorskip("mindformers")
from mindformers.core.callback.build_callback import build_callback  # noqa: E402
from mindformers.tools.register import MindFormerConfig  # noqa: E402
from mindformers.wrapper import MFTrainOneStepCell  # noqa: E402
from mindspore import dataset as ds  # noqa: E402
from mindspore import nn, ops  # noqa: E402

import trainer_hooks.mindformers_callback  # noqa: E402,F401  (registers the callback)
from tests.hooks_fixtures import regression_data, scalars, texts  # noqa: E402
from trainer_hooks import MindFormersHealthMonitor  # noqa: E402

pytestmark = pytest.mark.mindspore

YAML = """
callbacks:
  - type: TimeMonitor
  - type: HealthMonitor
    log_dir: {log_dir}
    collect_freq: 4
    weight_freq: 8
    online_analysis: False
"""


class CpuSafeMFTrainOneStepCell(MFTrainOneStepCell):
    """MFTrainOneStepCell whose overflow check (NPU kernels) is replaced by isfinite on the CPU."""

    def get_overflow_status(self, status, compute_output):
        finite = ops.stack([ops.isfinite(g).all() for g in compute_output])
        return ops.logical_not(finite.all())


@pytest.fixture(autouse=True)
def scratch_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindFormers creates output/log, MindSpore rank_0/ in the cwd


def callbacks_from_yaml(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(YAML.format(log_dir=tmp_path / "logs"))
    config = MindFormerConfig(str(path))
    return build_callback(config.callbacks)


def train(cell, callbacks, steps=16):
    x, y = regression_data(steps * 4)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
    ms.Model(cell).train(1, data, callbacks=callbacks, dataset_sink_mode=False)


def test_yaml_entry_builds_the_callback_that_logs_mindformers_outputs(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    callbacks = callbacks_from_yaml(tmp_path)
    (health,) = [c for c in callbacks if isinstance(c, MindFormersHealthMonitor)]
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
    optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=nn.ExponentialDecayLR(0.01, 0.5, 8))
    cell = CpuSafeMFTrainOneStepCell(
        nn.WithLossCell(net, nn.MSELoss()), optimizer, use_clip_grad=True, max_grad_norm=1e9, local_norm=True,
        scale_sense=nn.DynamicLossScaleUpdateCell(2.0**10, 2, 1000),
    )
    train(cell, callbacks)

    logged = scalars(tmp_path / "logs" / "rank_0")
    assert sorted(logged["train/loss"]) == [1, 4, 8, 12, 16]  # step 1: where the run starts from
    for step in (1, 4, 8, 12, 16):
        assert logged["train/lr"][step] == pytest.approx(0.01 * 0.5 ** ((step - 1) / 8), rel=1e-5)
        per_param = [logged[f"grad_norm/{p.name}"][step] for p in optimizer.parameters]
        assert logged["train/grad_norm"][step] == pytest.approx(math.sqrt(sum(v * v for v in per_param)), rel=1e-4)
        assert logged["train/loss_scale"][step] == 2.0**10
        assert logged["train/overflow"][step] == 0.0
    assert logged["train/overflow_count"] == {1: 0.0, 4: 0.0, 8: 0.0, 12: 0.0, 16: 0.0}
    assert sorted(logged[f"weight_norm/{optimizer.parameters[0].name}"]) == [8, 16]


def test_without_norm_outputs_it_says_how_to_enable_them(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    callbacks = callbacks_from_yaml(tmp_path)
    net = nn.Dense(8, 1)
    cell = CpuSafeMFTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    train(cell, callbacks, steps=8)
    run_dir = tmp_path / "logs" / "rank_0"
    logged = scalars(run_dir)
    assert np.isfinite(list(logged["train/loss"].values())).all() and "train/grad_norm" not in logged
    (note,) = texts(run_dir, "health/notes")
    assert "use_clip_grad" in note[1] and "local_norm" in note[1]
