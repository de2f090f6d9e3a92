"""The cheap path of the hooks (window aggregates on the host, one read of the health vector a
step) checked on real MindSpore CPU trainings against what a plain loop computes step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn  # noqa: E402
from mindspore import dataset as ds  # noqa: E402

from tests.hooks_fixtures import regression_data, scalars, texts  # noqa: E402
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth  # noqa: E402
from trainer_hooks.train_cell import HEALTH_LOSS, HEALTH_WINDOW  # noqa: E402

pytestmark = pytest.mark.mindspore
BATCH = 4
STEPS = 20
COLLECT_FREQ = 5
SPIKE_STEP = 7  # not a logged step: its spike must reach the window aggregates of step 10


@pytest.fixture(autouse=True)
def scratch_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd


def mlp() -> nn.Cell:
    ms.set_seed(0)
    return nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))


def spiky_data() -> tuple[np.ndarray, np.ndarray]:
    x, y = regression_data(STEPS * BATCH)
    y[(SPIKE_STEP - 1) * BATCH : SPIKE_STEP * BATCH] *= 100.0  # one batch with a huge loss and gradient
    return x, y


def plain_loop(x: np.ndarray, y: np.ndarray) -> tuple[dict[int, float], dict[int, float]]:
    """Each step's loss and global gradient norm (float64 on the host), same net, same updates."""
    net = mlp()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)
    losses, norms = {}, {}
    for step in range(1, STEPS + 1):
        rows = slice((step - 1) * BATCH, step * BATCH)
        loss, grads = grad_fn(Tensor(x[rows]), Tensor(y[rows]))
        losses[step] = float(loss.asnumpy())
        norms[step] = math.sqrt(sum(float(np.sum(np.square(g.asnumpy().astype(np.float64)))) for g in grads))
        optimizer(grads)
    return losses, norms


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_every_step_reaches_the_window_aggregates(tmp_path, mode):
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    x, y = spiky_data()
    losses, norms = plain_loop(x, y)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=COLLECT_FREQ, online_analysis=False)
    train_set = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    model.train(1, train_set, callbacks=[monitor], dataset_sink_mode=False)

    logged = scalars(tmp_path / "logs" / "rank_0")
    logged_steps = [1, *range(COLLECT_FREQ, STEPS + 1, COLLECT_FREQ)]
    assert sorted(logged["train/loss"]) == logged_steps
    for previous, step in zip([0, *logged_steps[:-1]], logged_steps, strict=True):
        window = range(previous + 1, step + 1)
        assert logged["train/loss"][step] == pytest.approx(losses[step], rel=1e-5)
        assert logged["train/grad_norm"][step] == pytest.approx(norms[step], rel=1e-5)
        assert logged["train/loss_max"][step] == pytest.approx(max(losses[s] for s in window), rel=1e-5)
        assert logged["train/loss_min"][step] == pytest.approx(min(losses[s] for s in window), rel=1e-5)
        assert logged["train/grad_norm_max"][step] == pytest.approx(max(norms[s] for s in window), rel=1e-5)
        assert logged["train/nonfinite_count"][step] == 0.0
    spike_window = 2 * COLLECT_FREQ
    assert logged["train/grad_norm_max"][spike_window] == pytest.approx(norms[SPIKE_STEP], rel=1e-5)
    assert logged["train/grad_norm_max"][spike_window] > 10 * logged["train/grad_norm"][spike_window]
    per_param = [logged[f"grad_norm/{p.name}"][spike_window] for p in optimizer.parameters]
    assert math.sqrt(sum(v * v for v in per_param)) == pytest.approx(norms[spike_window], rel=1e-5)


def test_a_graph_compiled_without_the_device_window_says_so_in_sink_mode(tmp_path):
    """The window flag is read at compilation: a cell compiled by the user before the monitor
    saw sink mode cannot keep every step's aggregates, and the note must not claim it does."""
    from mindspore.train.callback._callback import InternalCallbackParam, RunContext

    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.001))
    x, y = regression_data(BATCH)
    cell.device_window = False
    first = cell(Tensor(x), Tensor(y))[1].asnumpy()  # compiled now, without the window
    assert first[HEALTH_WINDOW] == -1.0
    params = InternalCallbackParam(train_network=cell, optimizer=None, dataset_sink_mode=True, cur_step_num=0, net_outputs=None)
    context = RunContext(params)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=4, online_analysis=False)
    monitor.on_train_begin(context)  # asks for the window: too late for the compiled graph
    for step in range(1, 9):
        params.net_outputs = cell(Tensor(x), Tensor(y))
        if step % 4 == 0:
            params.cur_step_num = step
            monitor.on_train_step_end(context)
    loss = float(params.net_outputs[1].asnumpy()[HEALTH_LOSS])
    monitor.on_train_end(context)
    logged = scalars(tmp_path / "logs" / "rank_0")
    assert logged["train/loss"][8] == pytest.approx(loss, rel=1e-6)
    (note,) = texts(tmp_path / "logs" / "rank_0", "health/notes")
    assert "cover only those last steps" in note[1]
