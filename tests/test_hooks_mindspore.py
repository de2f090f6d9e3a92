"""The hooks on real MindSpore CPU trainings: Model.train (graph and PyNative, sink on and off,
with and without loss scaling), custom loops, interrupts and stops; logs read back by
TensorBoard's EventAccumulator and by the project's readers."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore import dataset as ds  # noqa: E402
from mindspore.train.callback import Callback  # noqa: E402

from tests.hooks_fixtures import ManualClock, accumulator, findings, regression_data, scalars, texts  # noqa: E402
from trainer_hooks import HealthLogger, HealthMonitor, TrainOneStepWithHealth, grad_norm_stats, lr_of_step  # noqa: E402
from trainer_hooks.timing import StepClock  # noqa: E402
from trainer_hooks.train_cell import HEALTH_GRAD_STATS, HEALTH_LOSS_SCALE, HEALTH_LR, HEALTH_OVERFLOW  # noqa: E402

pytestmark = pytest.mark.mindspore
BATCH = 4


@pytest.fixture(autouse=True)
def scratch_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd


def mlp(seed: int = 0) -> nn.Cell:
    ms.set_seed(seed)
    return nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))


def dataset(samples: int = 64, seed: int = 0, x=None, y=None):
    if x is None:
        x, y = regression_data(samples, seed=seed)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


class StepRecorder(Callback):
    """Keeps each step's loss and (on chosen steps) the weights, to check the logs against."""

    def __init__(self, weight_steps=(), interrupt_at=None):
        super().__init__()
        self.losses: dict[int, float] = {}
        self.weights: dict[int, dict[str, np.ndarray]] = {}
        self.weight_steps = set(weight_steps)
        self.interrupt_at = interrupt_at
        self.last_step = 0

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        step = cb.cur_step_num
        self.last_step = step
        out = cb.net_outputs
        loss = out[0] if isinstance(out, (tuple, list)) else out
        self.losses[step] = float(loss.asnumpy())
        if step in self.weight_steps:
            self.weights[step] = {p.name: p.asnumpy().copy() for p in cb.train_network.trainable_params()}
        if step == self.interrupt_at:
            raise KeyboardInterrupt


def test_model_train_with_the_health_cell_in_graph_mode(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    schedule = nn.ExponentialDecayLR(0.01, 0.9, 10)
    optimizer = nn.Adam(net.trainable_params(), learning_rate=schedule)
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    recorder = StepRecorder(weight_steps=(7, 8, 16))
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=4, weight_freq=8, histogram_freq=16)
    model.train(2, dataset(64), callbacks=[recorder, monitor], dataset_sink_mode=False)

    logged = scalars(tmp_path / "logs" / "rank_0")
    steps = [1, *range(4, 33, 4)]  # step 1 too: where the run starts from
    assert sorted(logged["train/loss"]) == steps
    for previous, step in zip([0, *steps[:-1]], steps, strict=True):
        assert logged["train/loss"][step] == pytest.approx(recorder.losses[step], rel=1e-6)
        window = [recorder.losses[s] for s in range(previous + 1, step + 1)]  # step 1's window: itself
        assert logged["train/loss_max"][step] == pytest.approx(max(window), rel=1e-6)
        assert logged["train/loss_min"][step] == pytest.approx(min(window), rel=1e-6)
        # the rate used by step s is the schedule at global step s - 1
        assert logged["train/lr"][step] == pytest.approx(0.01 * 0.9 ** ((step - 1) / 10), rel=1e-5)
        per_param = [logged[f"grad_norm/{p.name}"][step] for p in optimizer.parameters]
        assert logged["train/grad_norm"][step] == pytest.approx(math.sqrt(sum(v * v for v in per_param)), rel=1e-5)
        assert logged["train/grad_norm_max"][step] >= logged["train/grad_norm"][step]
        if step > 1:  # step 1 has no previous step to time it from
            assert logged["train/throughput"][step] == pytest.approx(BATCH * 1000 / logged["train/step_time_ms"][step])
    assert "train/loss_scale" not in logged  # no loss scaling: nothing pretends otherwise
    name = optimizer.parameters[0].name
    assert logged[f"weight_norm/{name}"][8] == pytest.approx(np.linalg.norm(recorder.weights[8][name]), rel=1e-5)
    expected_ratio = np.linalg.norm(recorder.weights[8][name] - recorder.weights[7][name]) / np.linalg.norm(
        recorder.weights[7][name]
    )
    assert logged[f"update_ratio/{name}"][8] == pytest.approx(expected_ratio, rel=1e-4)
    histograms = accumulator(tmp_path / "logs" / "rank_0").Histograms(f"weight/{name}")
    assert [h.step for h in histograms] == [16, 32]
    assert histograms[0].histogram_value.num == recorder.weights[16][name].size

    from tb_health_plugin.readers import read_logdir

    (run,) = read_logdir(tmp_path / "logs")
    assert run.name == "rank_0"
    assert run.scalars["train/grad_norm"].steps.tolist() == steps
    assert f"weight/{name}" in run.histograms


def test_health_cell_norms_match_value_and_grad():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp(1)
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), learning_rate=[0.5, 0.25])
    x, y = regression_data(BATCH, seed=3)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)
    loss, grads = grad_fn(Tensor(x), Tensor(y))
    expected = [np.linalg.norm(g.asnumpy().astype(np.float64)) for g in grads]
    cell = TrainOneStepWithHealth(loss_net, optimizer)
    for step in (1, 2):
        step_loss, health = cell(Tensor(x), Tensor(y))
        health = health.asnumpy()
        if step == 1:
            assert float(step_loss.asnumpy()) == pytest.approx(float(loss.asnumpy()), rel=1e-6)
            assert health[HEALTH_GRAD_STATS + 1 :] == pytest.approx(expected, rel=1e-5)
            assert health[HEALTH_GRAD_STATS] == pytest.approx(np.sqrt(np.sum(np.square(expected))), rel=1e-5)
        assert health[HEALTH_LR] == pytest.approx([0.5, 0.25][step - 1])
        assert health[HEALTH_LOSS_SCALE] == 1.0 and health[HEALTH_OVERFLOW] == 0.0


@pytest.mark.parametrize("magnitude", [1e-30, 1e-20, 1.0, 1e20, 1e30])
def test_grad_norms_neither_underflow_nor_overflow(magnitude):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rng = np.random.default_rng(0)
    arrays = [(rng.normal(size=shape) * magnitude).astype(np.float32) for shape in ((3, 5), (7,), (2, 2, 2))]
    stats = grad_norm_stats(tuple(Tensor(a) for a in arrays)).asnumpy().astype(np.float64)
    expected = [np.linalg.norm(a.astype(np.float64)) for a in arrays]
    assert stats[1:] == pytest.approx(expected, rel=1e-5)
    assert stats[0] == pytest.approx(np.linalg.norm(np.concatenate([a.ravel() for a in arrays]).astype(np.float64)), rel=1e-5)
    zeros = grad_norm_stats((Tensor(np.zeros(3, np.float32)),)).asnumpy()
    assert zeros.tolist() == [0.0, 0.0]
    nonfinite = grad_norm_stats((Tensor(np.array([1.0, np.nan], np.float32)),)).asnumpy()
    assert not np.isfinite(nonfinite).any()


def test_plain_model_in_pynative_mode_logs_what_it_can_and_eval_metrics(tmp_path):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = mlp()
    rates = [0.01 * (i + 1) for i in range(12)]
    optimizer = nn.SGD(net.trainable_params(), learning_rate=rates)
    model = ms.Model(net, nn.MSELoss(), optimizer, metrics={"mae": nn.MAE()})
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=3, weight_freq=6, online_analysis=False)
    model.fit(1, dataset(48), valid_dataset=dataset(16, seed=1), callbacks=[monitor], dataset_sink_mode=False)

    run_dir = tmp_path / "logs" / "rank_0"
    logged = scalars(run_dir)
    assert logged["train/lr"] == pytest.approx({s: rates[s - 1] for s in (1, 3, 6, 9, 12)})
    assert "train/grad_norm" not in logged and not any(t.startswith("grad_norm/") for t in logged)
    assert sorted(logged[f"weight_norm/{optimizer.parameters[0].name}"]) == [6, 12]
    assert set(logged["eval/loss"]) == {12} and set(logged["eval/mae"]) == {12}
    (note,) = texts(run_dir, "health/notes")
    assert "TrainOneStepWithHealth" in note[1]


def test_dataset_sink_mode_on_logs_every_collection(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=4, online_analysis=False)
    model.train(2, dataset(32), callbacks=[monitor], dataset_sink_mode=True, sink_size=4)
    logged = scalars(tmp_path / "logs" / "rank_0")
    # MindSpore's CPU backend runs sink mode step by step: every step is visible
    assert sorted(logged["train/grad_norm"]) == [1, 4, 8, 12, 16]


def test_sink_style_step_jumps_keep_every_steps_spikes_and_are_reported(tmp_path):
    """What Model's device sink loop hands callbacks (one call per sink of 4 steps), driven by hand
    because the CPU backend never sinks: the cell's in-graph aggregates still see every step."""
    from mindspore.train.callback._callback import InternalCallbackParam, RunContext

    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.001)
    # a fixed loss scale of 1: the NaN step counts as an overflow and leaves the weights alone
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer, scale_sense=1.0)
    x, y = regression_data(BATCH)
    spike_y, nan_y = y * 100.0, np.full_like(y, np.nan)
    params = InternalCallbackParam(
        train_network=cell, optimizer=None, dataset_sink_mode=True, cur_step_num=0, net_outputs=None
    )
    context = RunContext(params)
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=4, online_analysis=False)
    monitor.on_train_begin(context)
    clock = ManualClock()
    monitor.health.clock = StepClock(now=clock)
    losses = {}
    for step in range(1, 17):
        labels = spike_y if step == 6 else nan_y if step == 10 else y
        params.net_outputs = cell(Tensor(x), Tensor(labels))
        losses[step] = float(params.net_outputs[0].asnumpy())
        clock.now += 0.01  # each step takes 10 ms
        if step % 4 == 0:  # the end of a sink
            params.cur_step_num = step
            monitor.on_train_step_end(context)
    monitor.on_train_end(context)
    run_dir = tmp_path / "logs" / "rank_0"
    logged = scalars(run_dir)
    assert logged["train/loss"] == pytest.approx({s: losses[s] for s in (4, 8, 12, 16)}, rel=1e-6)
    assert logged["train/loss_max"][8] == pytest.approx(losses[6], rel=1e-6)  # not a sink end
    assert logged["train/loss_max"][8] > 100 * logged["train/loss"][8]
    finite_12 = [losses[s] for s in (9, 11, 12)]
    assert logged["train/loss_max"][12] == pytest.approx(max(finite_12), rel=1e-6)
    assert logged["train/loss_min"][12] == pytest.approx(min(finite_12), rel=1e-6)
    assert logged["train/nonfinite_count"] == {4: 0.0, 8: 0.0, 12: 2.0, 16: 0.0}  # loss and grad norm
    assert logged["train/overflow_count"] == {4: 0.0, 8: 0.0, 12: 1.0, 16: 0.0}
    assert logged["train/step_time_ms"] == pytest.approx({8: 10.0, 12: 10.0, 16: 10.0})  # a sink's time / its 4 steps
    (note,) = texts(run_dir, "health/notes")
    assert note[0] == 4 and "4 steps" in note[1] and "still cover every step" in note[1]


def test_loss_scale_overflow_is_logged_and_skips_the_update(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    scale_cell = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0**127, scale_factor=2**20, scale_window=1000)
    cell = TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer, scale_sense=scale_cell)
    model = ms.Model(cell)
    recorder = StepRecorder(weight_steps=(1, 2, 3, 4))
    recorder.weights[0] = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=1, online_analysis=False)
    model.train(1, dataset(32), callbacks=[recorder, monitor], dataset_sink_mode=False)
    logged = scalars(tmp_path / "logs" / "rank_0")
    overflow = logged["train/overflow"]
    scale = logged["train/loss_scale"]
    assert overflow[1] == 1.0 and overflow[8] == 0.0
    assert scale[1] == 2.0**127 and scale[2] == 2.0**107  # divided by scale_factor after an overflow
    first_clean = min(s for s, v in overflow.items() if v == 0.0)
    assert all(scale[s] == scale[first_clean] for s in range(first_clean, 9))
    assert not math.isfinite(logged["train/grad_norm"][1])
    assert all(math.isfinite(logged["train/grad_norm"][s]) for s in range(first_clean, 9))
    # overflowing steps do not touch the weights, the others do
    for step in range(1, 5):
        changed = [not np.array_equal(w, recorder.weights[step][n]) for n, w in recorder.weights[step - 1].items()]
        assert any(changed) == (overflow[step] == 0.0)
    assert all(np.isfinite(w).all() for w in recorder.weights[4].values())


def test_interrupted_training_leaves_readable_closed_logs(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01)))
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=5, online_analysis=False, flush_secs=600)
    with pytest.raises(KeyboardInterrupt):
        model.train(1, dataset(64), callbacks=[monitor, StepRecorder(interrupt_at=13)], dataset_sink_mode=False)
    assert monitor.health is None  # closed by the callback context on the way out
    logged = scalars(tmp_path / "logs" / "rank_0")
    assert sorted(logged["train/loss"]) == [1, 5, 10]
    assert logged["train/loss_max"][13] > 0  # the partial window up to the interrupt


def test_stop_on_critical_finding_stops_model_train(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)

    def analyze(run):
        loss = run.scalars["train/loss"]
        bad = loss.steps[~np.isfinite(loss.values)]
        found = [{"kind": "nonfinite", "severity": "critical", "step": int(bad[0]), "tag": "train/loss",
                  "message": "The loss is NaN.", "evidence": {}}] if bad.size else []
        return {"run": run.name, "findings": found}

    x, y = regression_data(160)
    y[40:] = np.nan  # from step 11 on the loss is NaN
    net = mlp()
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01)))
    recorder = StepRecorder()
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=2, analyze_every=1, stop_on_critical=True, analyze=analyze)
    model.train(1, dataset(x=x, y=y), callbacks=[recorder, monitor], dataset_sink_mode=False)
    assert recorder.last_step == 11  # at the NaN step itself, not when the analysis catches up
    written = findings(tmp_path / "logs" / "rank_0")
    assert [(s, f["kind"], f["severity"]) for s, f in written] == [(11, "nonfinite", "critical")]


@pytest.mark.parametrize("nan_from", [21, 50])
def test_stop_on_critical_stops_at_the_first_nonfinite_step(tmp_path, nan_from):
    """A 60-step run (collect every 10, analyse every 10 collections) whose loss turns NaN at
    step 50 used to train to its end; at step 21, it used to stop dozens of steps late."""
    ms.set_context(mode=ms.GRAPH_MODE)
    x, y = regression_data(60 * BATCH)
    y[(nan_from - 1) * BATCH:] = np.nan
    net = mlp()
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01)))
    recorder = StepRecorder()
    monitor = HealthMonitor(str(tmp_path / "logs"), collect_freq=10, stop_on_critical=True)
    model.train(1, dataset(x=x, y=y), callbacks=[recorder, monitor], dataset_sink_mode=False)
    assert recorder.last_step == nan_from
    assert math.isnan(recorder.losses[nan_from]) and math.isfinite(recorder.losses[nan_from - 1])
    logged = scalars(tmp_path / "logs" / "rank_0")
    assert math.isnan(logged["train/loss"][nan_from]) and logged["train/nonfinite_count"][nan_from] >= 1
    # logged in full, per-parameter gradient norms included, at a step that is not a collection
    per_parameter = [tag for tag in logged if tag.startswith("grad_norm/")]
    assert per_parameter and all(nan_from in logged[tag] for tag in per_parameter)
    assert any(f["kind"] == "nonfinite" and f["severity"] == "critical" for _, f in findings(tmp_path / "logs" / "rank_0"))


@pytest.mark.parametrize("mode", ["pynative", "jit"])
def test_custom_loop_with_value_and_grad(tmp_path, mode):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    x, y = regression_data(BATCH, seed=5)
    net = mlp()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    rates = [0.05, 0.04, 0.03, 0.02, 0.01, 0.005]
    optimizer = nn.SGD(net.trainable_params(), learning_rate=rates)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def jit_train_step(inputs, labels):
        loss, grads = grad_fn(inputs, labels)
        return ops.depend(loss, optimizer(grads)), grad_norm_stats(grads)

    health = HealthLogger(tmp_path, collect_freq=2, parameters=net, online_analysis=False)
    expected = {}
    for step in range(1, 7):
        _, reference_grads = grad_fn(Tensor(x), Tensor(y))
        expected[step] = np.linalg.norm(reference_grads[0].asnumpy())
        if mode == "jit":
            loss, stats = jit_train_step(Tensor(x), Tensor(y))
            health.log_step(step, loss, grad_stats=stats, lr=lr_of_step(optimizer, step))
        else:
            loss, grads = grad_fn(Tensor(x), Tensor(y))
            optimizer(grads)
            health.log_step(step, loss, grads=grads, lr=lr_of_step(optimizer, step))
    health.close()
    logged = scalars(tmp_path / "rank_0")
    first = optimizer.parameters[0].name
    assert logged[f"grad_norm/{first}"] == pytest.approx({s: expected[s] for s in (1, 2, 4, 6)}, rel=1e-5)
    assert logged["train/lr"] == pytest.approx({1: 0.05, 2: 0.04, 4: 0.02, 6: 0.005})
    assert logged["train/loss"][6] < logged["train/loss"][2]


def test_monitor_arguments_are_validated_at_construction(tmp_path):
    with pytest.raises(ValueError, match="collect_freq must be a positive integer"):
        HealthMonitor(str(tmp_path), collect_freq=0)
    with pytest.raises(TypeError, match="scale_sense must be None, a number"):
        TrainOneStepWithHealth(nn.WithLossCell(mlp(), nn.MSELoss()), nn.SGD(mlp().trainable_params()), scale_sense="big")
