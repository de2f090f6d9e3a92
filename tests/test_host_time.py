"""`train/host_time_ms`: the hooks log each rank's time outside the compiled step on a real
MindSpore CPU training, and the project's readers and job check take it as the per-rank time."""

from __future__ import annotations

import math

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import dataset as ds  # noqa: E402
from mindspore import nn  # noqa: E402

from tests.hooks_fixtures import regression_data, scalars  # noqa: E402
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth  # noqa: E402

pytestmark = pytest.mark.mindspore


@pytest.fixture(autouse=True)
def scratch_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MindSpore writes rank_0/ and kernel folders into the cwd


def train(logdir, rank: int, world_size: int = 1, steps: int = 24) -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    x, y = regression_data(4 * steps, seed=rank)

    def batches():  # a Python data pipeline, as most trainings have
        for i in range(steps):
            yield x[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4]

    dataset = ds.GeneratorDataset(batches, column_names=["x", "y"], shuffle=False)
    monitor = HealthMonitor(str(logdir), collect_freq=4, rank=rank, world_size=world_size, online_analysis=False)
    model.train(1, dataset, callbacks=[monitor], dataset_sink_mode=False)


def test_model_train_logs_the_host_time_of_every_window(tmp_path):
    train(tmp_path / "logs", rank=0)
    logged = scalars(tmp_path / "logs" / "rank_0")
    host = logged["train/host_time_ms"]
    assert sorted(host) == sorted(logged["train/step_time_ms"]) == list(range(4, 25, 4))
    assert all(math.isfinite(v) and v >= 0 for v in host.values())


def test_the_readers_give_host_time_its_role_for_the_job_check(tmp_path):
    from tb_health_plugin.analysis.checks.throughput import _rank_measure
    from tb_health_plugin.analysis.signals import RunSignals
    from tb_health_plugin.readers import read_logdir

    for rank in (0, 1):
        train(tmp_path / "logs", rank=rank, world_size=2)
    runs = {r.name: RunSignals.from_run(r) for r in read_logdir(tmp_path / "logs")}
    assert sorted(runs) == ["rank_0", "rank_1"]
    measure, series = _rank_measure(runs)
    assert measure == "host_time" and set(series) == set(runs)
    for _, values, tag in series.values():
        assert tag == "train/host_time_ms" and np.all(np.isfinite(values))
