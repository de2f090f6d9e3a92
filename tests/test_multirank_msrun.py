"""Two ranks on one machine with MindSpore's own launcher (`msrun`, CPU backend, data parallel):
each rank writes its own run `rank_<id>/`, histograms only on the chosen rank."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hooks_fixtures import accumulator, scalars

pytestmark = pytest.mark.mindspore
REPO = Path(__file__).resolve().parents[1]

WORKER = '''
import sys
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore import dataset as ds
from mindspore.communication import get_rank, init

ms.set_context(mode=ms.GRAPH_MODE)
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth
from trainer_hooks.ranks import detect_rank

print("tb-health rank:", detect_rank(), flush=True)

rng = np.random.default_rng(get_rank())  # each rank sees different data
x = rng.normal(size=(40, 8)).astype(np.float32)
y = x.sum(axis=1, keepdims=True)
ms.set_seed(0)
net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), optimizer))
monitor = HealthMonitor(sys.argv[1], collect_freq=5, weight_freq=5, histogram_freq=5, online_analysis=False)
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
model.train(1, data, callbacks=[monitor], dataset_sink_mode=False)
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_msrun_two_ranks_write_one_run_each(tmp_path):
    bin_dir = Path(sys.executable).parent
    msrun = shutil.which("msrun", path=str(bin_dir)) or shutil.which("msrun")
    if msrun is None:
        pytest.skip("msrun (MindSpore's launcher) is not installed")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(REPO))
    command = [
        msrun, "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
        f"--log_dir={tmp_path / 'msrun_log'}", "--join=True", str(script), str(tmp_path / "logs"),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    worker_logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted((tmp_path / "msrun_log").glob("worker_*.log")))
    assert done.returncode == 0, worker_logs
    for rank in (0, 1):
        assert f"RankInfo(rank={rank}, world_size=2, source='mindspore.communication')" in worker_logs

    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["rank_0", "rank_1"]
    rank0, rank1 = (scalars(tmp_path / "logs" / f"rank_{r}") for r in (0, 1))
    assert sorted(rank0["train/loss"]) == sorted(rank1["train/loss"]) == [1, 5, 10]
    assert rank0["train/loss"][5] != rank1["train/loss"][5]  # different data on each rank
    # gradients are all-reduced across ranks before the norms are taken: the same on both
    assert rank0["train/grad_norm"] == pytest.approx(rank1["train/grad_norm"], rel=1e-5)
    assert accumulator(tmp_path / "logs" / "rank_0").Tags()["histograms"]
    assert accumulator(tmp_path / "logs" / "rank_1").Tags()["histograms"] == []
