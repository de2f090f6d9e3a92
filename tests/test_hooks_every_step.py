"""The cheap path of the hooks (window aggregates on the host, one read of the health vector a
step, every gradient norm from one compiled graph: fused rows or per tensor) checked on real
MindSpore CPU trainings against what a plain loop computes step by step."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore import dataset as ds  # noqa: E402

from tests.hooks_fixtures import regression_data, scalars, texts  # noqa: E402
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth  # noqa: E402
from trainer_hooks.norms import ROW_VALUES, RowLayout, row_norm_stats  # noqa: E402
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


@pytest.mark.parametrize("path", ["fused", "per_tensor"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_every_step_computes_every_norm_equal_to_a_plain_loop(tmp_path, monkeypatch, mode, path):
    """Each step's health vector holds the loss, the global and every per-parameter gradient
    norm of a plain loop's same step, by the fused rows (this MLP's 161 values fit) or per tensor
    (`FUSED_MAX_PARAMETERS` lowered below them); the logged steps write those per-parameter norms
    and the window aggregates keep the spike of a step not logged."""
    import trainer_hooks.norms

    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    if path == "per_tensor":
        monkeypatch.setattr(trainer_hooks.norms, "FUSED_MAX_PARAMETERS", 100)
    x, y = spiky_data()
    losses, norms, param_norms = plain_loop(x, y)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    assert cell.fused_norms == (path == "fused")
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
        assert health[HEALTH_GRAD_STATS + 1 :] == pytest.approx(param_norms[step], rel=1e-5), step
    for parameter, index in zip(optimizer.parameters, range(len(optimizer.parameters)), strict=True):
        written = logged[f"grad_norm/{parameter.name}"]
        assert written == pytest.approx({s: param_norms[s][index] for s in logged_steps}, rel=1e-5)
    assert logged["train/grad_norm_max"][2 * COLLECT_FREQ] == pytest.approx(norms[SPIKE_STEP], rel=1e-5)


def test_lean_steps_is_accepted_with_a_deprecation_warning(tmp_path):
    """Configurations written for the earlier two-graph cell still load, and say the option is gone."""
    from trainer_hooks import HealthOptions

    with pytest.warns(DeprecationWarning, match="lean_steps"):
        options = HealthOptions(str(tmp_path), lean_steps=False)
    assert options.collect_freq == 10


def test_sink_mode_runs_the_full_graph_every_step(tmp_path):
    """In sink mode the callback sees one step per sink: every step still computes every norm.
    Driven by hand as Model's device sink loop calls the callbacks (the
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


def test_dynamic_loss_scaling_flags_skips_and_counts_overflowing_steps(tmp_path):
    """An overflowing step, logged or not, is flagged, skipped and lowers the scale, and the
    window's overflow count covers every step."""
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
    unlogged_overflows = [s for s in (2, 3) if overflow[s] == 1.0]
    assert unlogged_overflows, overflow  # 2^127 / 2^20 still overflows: a step not logged meets one
    for step in unlogged_overflows:
        assert not np.isfinite(vectors.vectors[step][HEALTH_GRAD_STATS])
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


@pytest.mark.parametrize("path", ["fused", "per_tensor"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
@pytest.mark.parametrize("factor", [1e-30, 1.0, 1e30])
def test_the_norms_survive_underflowing_and_overflowing_squares(monkeypatch, mode, factor, path):
    """Both paths give the true global and per-parameter norms for gradients whose float32
    squares underflow to 0 or overflow to inf (their fallback: the scaled per-tensor norms)."""
    import trainer_hooks.norms

    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    if path == "per_tensor":
        monkeypatch.setattr(trainer_hooks.norms, "FUSED_MAX_PARAMETERS", 100)
    net = mlp()
    loss_net = ScaledLoss(net, factor)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.0)
    x, y = regression_data(BATCH)
    _, grads = ms.value_and_grad(loss_net, None, optimizer.parameters)(Tensor(x), Tensor(y))
    per_param = [float(np.linalg.norm(g.asnumpy().astype(np.float64))) for g in grads]
    expected = math.sqrt(sum(v * v for v in per_param))
    float32_square_sum = sum(np.sum(np.square(g.asnumpy())) for g in grads)
    assert float32_square_sum in ((0.0, np.inf) if factor != 1.0 else (float32_square_sum,))
    assert 0 < expected < np.inf
    cell = TrainOneStepWithHealth(loss_net, optimizer)
    assert cell.fused_norms == (path == "fused")
    health = cell(Tensor(x), Tensor(y))[1].asnumpy()
    assert health[HEALTH_GRAD_STATS] == pytest.approx(expected, rel=1e-5, abs=0)
    assert health[HEALTH_GRAD_STATS + 1 :] == pytest.approx(per_param, rel=1e-5, abs=0)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_the_fused_rows_match_float64_norms_on_padded_sizes_and_mixed_magnitudes(mode):
    """Sizes below, at and across a row (the padding), and a parameter 1e-25 beside one of 1e3
    (its float32 squares underflow: the fallback), NaN, Inf and all-zero gradients."""
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    rng = np.random.default_rng(0)
    shapes = [(3,), (ROW_VALUES,), (ROW_VALUES + 1,), (7, 45), (2, ROW_VALUES, 3)]

    def norms_of(arrays):
        layout = RowLayout(array.size for array in arrays)

        def stats(*grads):
            return row_norm_stats(grads, layout.pads, layout.row_segments, layout.count)

        run = ms.jit(stats) if mode == "graph" else stats
        return run(*(Tensor(array) for array in arrays)).asnumpy().astype(np.float64)

    for scales in ([1.0] * 5, [1e-3, 1e2, 1.0, 1e-1, 1e1], [1e3, 1e-25, 1.0, 1e-30, 1e20]):
        arrays = [(rng.standard_normal(shape) * scale).astype(np.float32) for shape, scale in zip(shapes, scales, strict=True)]
        expected = [np.linalg.norm(array.astype(np.float64)) for array in arrays]
        got = norms_of(arrays)
        assert got[1:] == pytest.approx(expected, rel=1e-5, abs=0), scales
        assert got[0] == pytest.approx(math.sqrt(sum(v * v for v in expected)), rel=1e-5)
    zeros = norms_of([np.zeros(shape, np.float32) for shape in shapes])
    assert (zeros == 0.0).all()
    for bad in (np.nan, np.inf):
        arrays = [np.ones(shape, np.float32) for shape in shapes]
        arrays[2][5] = bad
        got = norms_of(arrays)
        assert not np.isfinite(got[0]) and not np.isfinite(got[3])
        assert got[1] == pytest.approx(math.sqrt(3))


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
