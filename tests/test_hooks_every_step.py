"""The cheap path of the hooks (window aggregates on the host, one read of the health vector a
step, per-parameter norms only in the graph of the logged steps) checked on real MindSpore CPU
trainings against what a plain loop computes step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore import dataset as ds  # noqa: E402

from tests.hooks_fixtures import regression_data, scalars, texts  # noqa: E402
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth  # noqa: E402
from trainer_hooks.norms import global_norm  # noqa: E402
from trainer_hooks.train_cell import HEALTH_GRAD_STATS, HEALTH_LOSS, HEALTH_WINDOW  # noqa: E402

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


def plain_loop(x: np.ndarray, y: np.ndarray) -> tuple[dict[int, float], dict[int, float], dict[int, list[float]]]:
    """Each step's loss, global and per-parameter gradient norms (float64 on the host), same net,
    same updates."""
    net = mlp()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)
    losses, norms, param_norms = {}, {}, {}
    for step in range(1, STEPS + 1):
        rows = slice((step - 1) * BATCH, step * BATCH)
        loss, grads = grad_fn(Tensor(x[rows]), Tensor(y[rows]))
        losses[step] = float(loss.asnumpy())
        param_norms[step] = [float(np.linalg.norm(g.asnumpy().astype(np.float64))) for g in grads]
        norms[step] = math.sqrt(sum(v * v for v in param_norms[step]))
        optimizer(grads)
    return losses, norms, param_norms


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_every_step_reaches_the_window_aggregates(tmp_path, mode):
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    x, y = spiky_data()
    losses, norms, _ = plain_loop(x, y)
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


class HealthVectors(ms.train.callback.Callback):
    """Keeps every step's health vector (the callback after the monitor)."""

    def __init__(self) -> None:
        super().__init__()
        self.vectors: dict[int, np.ndarray] = {}

    def on_train_step_end(self, run_context) -> None:
        cb_params = run_context.original_args()
        self.vectors[int(cb_params.cur_step_num)] = cb_params.net_outputs[1].asnumpy().astype(np.float64)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_per_parameter_norms_only_in_the_graph_of_the_logged_steps(tmp_path, mode):
    """Steps the monitor does not log run the global-norm-only graph (per-parameter slots NaN:
    not computed), the logged ones the full graph, whose norms equal a plain loop's; every
    step's global norm equals the plain loop's. After training the cell computes every norm."""
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    x, y = spiky_data()
    losses, norms, param_norms = plain_loop(x, y)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=COLLECT_FREQ, online_analysis=False)
    vectors = HealthVectors()
    train_set = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.Model(cell).train(1, train_set, callbacks=[monitor, vectors], dataset_sink_mode=False)

    logged_steps = {1, *range(COLLECT_FREQ, STEPS + 1, COLLECT_FREQ)}
    assert sorted(vectors.vectors) == list(range(1, STEPS + 1))
    logged = scalars(tmp_path / "logs" / "rank_0")
    for step, health in vectors.vectors.items():
        assert health[HEALTH_LOSS] == pytest.approx(losses[step], rel=1e-5)
        assert health[HEALTH_GRAD_STATS] == pytest.approx(norms[step], rel=1e-5)
        per_param = health[HEALTH_GRAD_STATS + 1 :]
        if step in logged_steps:
            assert per_param == pytest.approx(param_norms[step], rel=1e-5)
        else:
            assert np.isnan(per_param).all(), step
    for parameter, index in zip(optimizer.parameters, range(len(optimizer.parameters)), strict=True):
        written = logged[f"grad_norm/{parameter.name}"]
        assert written == pytest.approx({s: param_norms[s][index] for s in logged_steps}, rel=1e-5)
    assert logged["train/grad_norm_max"][2 * COLLECT_FREQ] == pytest.approx(norms[SPIKE_STEP], rel=1e-5)
    after = cell(Tensor(x[:BATCH]), Tensor(y[:BATCH]))[1].asnumpy()
    assert np.isfinite(after[HEALTH_GRAD_STATS + 1 :]).all()  # direct calls: every norm, as by default


def test_a_model_above_the_lean_limit_runs_its_full_graph_every_step(tmp_path, monkeypatch):
    """The lean graph's global norm copies every gradient (37 bytes a parameter): a model above
    `LEAN_MAX_PARAMETERS` (here lowered below this MLP's 161) computes the per-tensor norms at
    every step, logged or not, even when asked for the lean graph, with the same global norms."""
    import trainer_hooks.norms

    ms.set_context(mode=ms.GRAPH_MODE)
    monkeypatch.setattr(trainer_hooks.norms, "LEAN_MAX_PARAMETERS", 100)
    x, y = spiky_data()
    losses, norms, param_norms = plain_loop(x, y)
    net = mlp()
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), learning_rate=0.001))
    assert not cell.lean_graph_fits
    vectors = HealthVectors()
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=COLLECT_FREQ, online_analysis=False)
    train_set = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.Model(cell).train(1, train_set, callbacks=[monitor, vectors], dataset_sink_mode=False)
    assert sorted(vectors.vectors) == list(range(1, STEPS + 1))
    for step, health in vectors.vectors.items():
        assert health[HEALTH_GRAD_STATS] == pytest.approx(norms[step], rel=1e-5)
        assert health[HEALTH_GRAD_STATS + 1 :] == pytest.approx(param_norms[step], rel=1e-5), step
    cell.param_norms = False  # a direct caller asking for the lean graph gets the full one too
    assert np.isfinite(cell(Tensor(x[:BATCH]), Tensor(y[:BATCH]))[1].asnumpy()[HEALTH_GRAD_STATS + 1 :]).all()


def test_lean_steps_off_keeps_one_graph_computing_every_norm(tmp_path):
    """`lean_steps=False` (a model whose second compile would cost more than it saves): every
    step runs the full graph, per-parameter norms included, and nothing else changes."""
    ms.set_context(mode=ms.GRAPH_MODE)
    x, y = spiky_data()
    losses, norms, param_norms = plain_loop(x, y)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=COLLECT_FREQ, online_analysis=False,
                            lean_steps=False)
    vectors = HealthVectors()
    train_set = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.Model(cell).train(1, train_set, callbacks=[monitor, vectors], dataset_sink_mode=False)

    assert sorted(vectors.vectors) == list(range(1, STEPS + 1))
    for step, health in vectors.vectors.items():
        assert health[HEALTH_LOSS] == pytest.approx(losses[step], rel=1e-5)
        assert health[HEALTH_GRAD_STATS] == pytest.approx(norms[step], rel=1e-5)
        assert health[HEALTH_GRAD_STATS + 1 :] == pytest.approx(param_norms[step], rel=1e-5), step


def test_sink_mode_runs_the_full_graph_every_step(tmp_path):
    """In sink mode the callback sees one step per sink and cannot choose a graph per step: every
    step computes every norm. Driven by hand as Model's device sink loop calls the callbacks (the
    CPU backend runs sink mode step by step, as without sinking)."""
    from mindspore.train.callback._callback import InternalCallbackParam, RunContext

    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), learning_rate=0.001))
    params = InternalCallbackParam(train_network=cell, optimizer=None, dataset_sink_mode=True, cur_step_num=0, net_outputs=None)
    context = RunContext(params)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=8, online_analysis=False)
    monitor.on_train_begin(context)
    x, y = regression_data(BATCH)
    for sink_end in (4, 8, 12):
        params.cur_step_num = sink_end  # Model advances it by the sink size before the sink runs
        monitor.on_train_step_begin(context)
        for _ in range(4):
            params.net_outputs = cell(Tensor(x), Tensor(y))
            assert np.isfinite(params.net_outputs[1].asnumpy()[HEALTH_GRAD_STATS:]).all()
        monitor.on_train_step_end(context)
    monitor.on_train_end(context)
    logged = scalars(tmp_path / "logs" / "rank_0")
    assert sorted(logged[f"grad_norm/{cell.weights[0].name}"]) == [4, 8]


def test_the_global_norm_only_graph_keeps_dynamic_loss_scaling(tmp_path):
    """Loss scaling in the lean graph: an overflowing step there is flagged, skipped and lowers
    the scale like in the full graph, and the window's overflow count covers every step."""
    from trainer_hooks.train_cell import HEALTH_LOSS_SCALE, HEALTH_OVERFLOW

    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    scale_cell = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0**127, scale_factor=2**20, scale_window=1000)
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.001), scale_sense=scale_cell)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=4, online_analysis=False)
    vectors = HealthVectors()
    x, y = regression_data(12 * BATCH)
    train_set = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.Model(cell).train(1, train_set, callbacks=[monitor, vectors], dataset_sink_mode=False)
    overflow = {step: health[HEALTH_OVERFLOW] for step, health in vectors.vectors.items()}
    scale = {step: health[HEALTH_LOSS_SCALE] for step, health in vectors.vectors.items()}
    lean_overflows = [s for s in (2, 3) if overflow[s] == 1.0]
    assert lean_overflows, overflow  # 2^127 / 2^20 still overflows: the lean graph meets one
    for step in lean_overflows:
        assert np.isnan(vectors.vectors[step][HEALTH_GRAD_STATS + 1 :]).all()
        assert scale[step + 1] == scale[step] / 2**20
    logged = scalars(tmp_path / "logs" / "rank_0")
    windows = {1: [1], 4: [2, 3, 4], 8: [5, 6, 7, 8], 12: [9, 10, 11, 12]}
    assert logged["train/overflow_count"] == {end: sum(overflow[s] for s in steps) for end, steps in windows.items()}


class ScaledLoss(nn.Cell):
    """The MSE times `factor`: with 1e-30 the gradients' squares underflow float32 to 0, with
    1e30 they overflow it to inf."""

    def __init__(self, net: nn.Cell, factor: float) -> None:
        super().__init__()
        self.net = net
        self.mse = nn.MSELoss()
        self.factor = factor

    def construct(self, x, y):
        return self.mse(self.net(x), y) * ops.cast(self.factor, ms.float32)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
@pytest.mark.parametrize("factor", [1e-30, 1.0, 1e30])
def test_the_global_norm_only_graph_survives_underflowing_and_overflowing_squares(mode, factor):
    """The lean graph's global norm (no branch, no per-parameter fallback) is the true one for
    gradients whose float32 squares underflow to 0 or overflow to inf."""
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    net = mlp()
    loss_net = ScaledLoss(net, factor)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.0)
    x, y = regression_data(BATCH)
    _, grads = ms.value_and_grad(loss_net, None, optimizer.parameters)(Tensor(x), Tensor(y))
    expected = math.sqrt(sum(float(np.sum(np.square(g.asnumpy().astype(np.float64)))) for g in grads))
    float32_square_sum = sum(np.sum(np.square(g.asnumpy())) for g in grads)
    assert float32_square_sum in ((0.0, np.inf) if factor != 1.0 else (float32_square_sum,))
    assert 0 < expected < np.inf
    cell = TrainOneStepWithHealth(loss_net, optimizer)
    cell.param_norms = False
    health = cell(Tensor(x), Tensor(y))[1].asnumpy()
    assert np.isnan(health[HEALTH_GRAD_STATS + 1 :]).all()  # the lean graph ran
    assert health[HEALTH_GRAD_STATS] == pytest.approx(expected, rel=1e-5, abs=0)


def test_the_global_norm_keeps_nan_and_inf_and_zero():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    assert float(global_norm((Tensor(np.zeros(3, np.float32)),)).asnumpy()) == 0.0
    assert math.isnan(float(global_norm((Tensor(np.array([1.0, np.nan], np.float32)),)).asnumpy()))
    assert math.isinf(float(global_norm((Tensor(np.array([1.0, np.inf], np.float32)),)).asnumpy()))


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
