"""Tags logged against the number of samples seen (MindFormers' `loss vs samples` twins) live on
their own axis: they never set a run's step range, never play a role, and are served as samples.

The log is MindFormers' own: its `MFLossMonitor` writes through its tensorboardX writer during a
real CPU training, every scalar twice (`loss` at the step, `loss_vs_samples` at step x batch).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.commands.check import check_logdir
from tb_health_plugin.contract import is_samples_axis, x_axis_of
from tb_health_plugin.plugin import HealthPlugin
from tb_health_plugin.readers import read_logdir

ms = pytest.importorskip("mindspore")
pytest.importorskip("mindformers")
from mindformers.core.callback.callback import MFLossMonitor  # noqa: E402
from mindformers.utils.tensorboard import _set_tensorboard_writer, _unset_tensorboard_writer  # noqa: E402
from mindspore import dataset as ds  # noqa: E402
from mindspore import nn  # noqa: E402

from tests.hooks_fixtures import regression_data  # noqa: E402
from tests.test_mindformers_callback import CpuSafeMFTrainOneStepCell  # noqa: E402

pytestmark = pytest.mark.mindspore
PREFIX = "/data/plugin/health"
STEPS, GLOBAL_BATCH = 20, 16


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("mindformers")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(scratch)  # MindFormers writes output/log, MindSpore rank_0/ into the cwd
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_seed(0)
        _set_tensorboard_writer(SimpleNamespace(tensorboard_dir=str(scratch / "logs" / "rank_0")))
        try:
            x, y = regression_data(STEPS * GLOBAL_BATCH)
            data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(GLOBAL_BATCH)
            net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
            optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-2)
            cell = CpuSafeMFTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer, use_clip_grad=True,
                                             max_grad_norm=1e9, scale_sense=nn.DynamicLossScaleUpdateCell(2.0**10, 2, 1000))
            monitor = MFLossMonitor(learning_rate=1e-2, origin_epochs=1, dataset_size=STEPS,
                                    global_batch_size=GLOBAL_BATCH)
            ms.Model(cell).train(1, data, callbacks=[monitor], dataset_sink_mode=False)
        finally:
            _unset_tensorboard_writer()
    return scratch / "logs"


def test_mindformers_writes_samples_twins_the_contract_recognises(logdir):
    (run,) = read_logdir(logdir)
    twins = sorted(tag for tag in run.scalars if is_samples_axis(tag))
    assert twins == ["batch-size_vs_samples", "grad-norm_vs_samples", "learning-rate_vs_samples", "loss_vs_samples"]
    assert int(run.scalars["loss_vs_samples"].steps[-1]) == STEPS * GLOBAL_BATCH
    assert run.step_range() == (1, STEPS)  # not (1, 320): samples are no steps


def test_cli_and_routes_show_the_training_steps_and_serve_twins_against_samples(logdir):
    report = check_logdir(str(logdir))
    assert report["runs"][0]["steps"] == {"first": 1, "last": STEPS}
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))
    client = Client(application.TensorBoardWSGI([plugin]))

    def get(path):
        response = client.get(PREFIX + path)
        assert response.status_code == 200, response.get_data(as_text=True)
        return json.loads(response.get_data(as_text=True))

    try:
        (row,) = get("/runs")["runs"]
        assert row["steps"] == {"first": 1, "last": STEPS}
        assert row["signals"]["loss"] == "loss" and not any(is_samples_axis(t) for t in row["signals"].values())
        tags = get("/tags?run=rank_0")
        assert tags["samples_axis"] == sorted(t for t in tags["scalars"] if is_samples_axis(t))
        twin = get("/series?run=rank_0&tag=loss_vs_samples")
        assert twin["x_axis"] == "samples" and twin["steps"][-1] == STEPS * GLOBAL_BATCH
        loss = get("/series?run=rank_0&tag=loss")
        assert loss["x_axis"] == "step" and loss["steps"][-1] == STEPS
    finally:
        plugin._service.stop()


def test_the_spellings_of_other_writers_are_on_the_samples_axis_too():
    assert x_axis_of("lm loss vs samples") == "samples"  # writers that keep the spaces
    assert x_axis_of("loss") == x_axis_of("samples_seen") == "step"
