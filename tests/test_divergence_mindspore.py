"""Real MindSpore CPU trainings far too hot (a 4-layer MLP at learning rate 5.0) through
`tb-health check`: a blow-up hidden in the first logging window, one that comes back to the
initial loss, and one that is NaN from the first logged point although it started finite."""

from __future__ import annotations

import json

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore import dataset as ds  # noqa: E402

from tb_health_plugin.cli import main  # noqa: E402
from trainer_hooks import HealthLogger, grad_norm_stats, lr_of_step  # noqa: E402

pytestmark = pytest.mark.mindspore
LR = 5.0
BATCH = 32


def mlp(seed: int = 0) -> nn.Cell:
    ms.set_seed(seed)
    return nn.SequentialCell(
        nn.Dense(16, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 1)
    )


def regression(batches: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batches * BATCH, 16)).astype(np.float32)
    y = (x @ rng.normal(size=(16, 1)) * 2 + 3).astype(np.float32)
    return x, y


def custom_loop(logdir, optimizer_class, steps: int, collect_freq: int) -> None:
    """The README's custom loop: `value_and_grad` under `ms.jit`, norms from `grad_norm_stats`."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = mlp()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = optimizer_class(net.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def train_step(inputs, labels):
        loss, grads = grad_fn(inputs, labels)
        return ops.depend(loss, optimizer(grads)), grad_norm_stats(grads)

    x, y = regression()
    with HealthLogger(logdir, collect_freq=collect_freq, parameters=net, batch_size=BATCH,
                      online_analysis=False) as health:
        for step in range(1, steps + 1):
            rows = slice((step % 10) * BATCH, (step % 10 + 1) * BATCH)
            loss, stats = train_step(Tensor(x[rows]), Tensor(y[rows]))
            health.log_step(step, loss, grad_stats=stats, lr=lr_of_step(optimizer, step))


def check(logdir, capsys) -> tuple[int, list[dict]]:
    capsys.readouterr()
    code = main(["check", str(logdir), "--format", "json"])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert len(runs) == 1
    return code, [f for f in runs[0]["findings"] if f["severity"] in ("warning", "critical")]


@pytest.fixture(autouse=True)
def scratch_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd


def test_a_blow_up_averaged_into_the_first_window_is_judged_from_the_window_minimum(tmp_path, capsys):
    # Adam at 5.0: the first window already averages a huge loss (its minimum is where the run
    # started); the loss falls from there but ends far above the start.
    custom_loop(tmp_path / "logs", nn.Adam, steps=100, collect_freq=5)
    code, found = check(tmp_path / "logs", capsys)
    divergence = [f for f in found if f["kind"] == "divergence"]
    assert code == 1 and divergence and divergence[0]["severity"] == "critical"
    evidence = divergence[0]["evidence"]
    assert evidence["ratio_end_to_start"] > 100
    assert evidence["start_loss"] < 1e3  # the first window's minimum, not its blown-up mean


def test_nan_in_the_first_window_after_a_finite_start_is_one_blow_up_with_learning_rate_advice(tmp_path, capsys):
    custom_loop(tmp_path / "logs", nn.SGD, steps=40, collect_freq=10)
    code, found = check(tmp_path / "logs", capsys)
    loss_findings = [f for f in found if f["kind"] in ("divergence", "nonfinite")]
    assert code == 1
    assert sorted(f["kind"] for f in loss_findings) == ["divergence", "nonfinite"]  # the gradient norm folded in
    divergence = next(f for f in loss_findings if f["kind"] == "divergence")
    nonfinite = next(f for f in loss_findings if f["kind"] == "nonfinite")
    assert "learning rate" in divergence["message"] and "started finite" in divergence["message"]
    text = " ".join(f["message"] for f in loss_findings)
    assert "never" not in text and "inputs" not in text
    assert nonfinite["evidence"]["part_of"] == "divergence"
    assert nonfinite["evidence"]["gradient_norm_nonfinite_from_step"] == nonfinite["step"]


def test_a_summary_collector_run_that_goes_through_garbage_and_comes_back_is_critical(tmp_path, capsys):
    from mindspore.train import Model, SummaryCollector

    ms.set_context(mode=ms.GRAPH_MODE)
    net = mlp()
    x, y = regression()
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    model = Model(net, nn.MSELoss(), nn.Adam(net.trainable_params(), learning_rate=LR))
    collector = SummaryCollector(str(tmp_path / "logs"), collect_freq=1,
                                 collect_specified_data={"collect_dataset_graph": False})
    model.train(30, data, callbacks=[collector], dataset_sink_mode=False)
    code, found = check(tmp_path / "logs", capsys)
    divergence = [f for f in found if f["kind"] == "divergence"]
    assert code == 1 and divergence and divergence[0]["severity"] == "critical"
    assert divergence[0]["step"] <= 3 and divergence[0]["evidence"]["ratio_peak_to_start"] > 1e6
