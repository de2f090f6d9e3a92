"""Faults around the hooks never break the training they record, and leave readable logs.

Each scenario is a real MindSpore CPU training of a tiny MLP (`Model.train` with
`TrainOneStepWithHealth` and `HealthMonitor`) in its own subprocess, all started together:
the disk filling up mid-run (RLIMIT_FSIZE with SIGXFSZ ignored), a log folder that cannot be
created, NaN/Inf batches, an exception inside the hook and inside the online analysis, SIGINT
and SIGKILL mid-training. The logs are then read with the project's readers and TensorBoard's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tb_health_plugin.readers import read_logdir
from tests.hooks_fixtures import scalars

pytestmark = pytest.mark.mindspore

REPO = Path(__file__).resolve().parents[1]
STEPS = 48  # one epoch of 192 samples in batches of 4
TIMEOUT_S = 240

TRAINING = r"""
import json, os, resource, signal, sys, time, warnings
scenario, log_dir = sys.argv[1], sys.argv[2]
import numpy as np
import mindspore as ms
from mindspore import nn, dataset as ds
from mindspore.train.callback import Callback
from trainer_hooks import HealthMonitor, TrainOneStepWithHealth

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(192, 8)).astype(np.float32)
y = (x @ rng.normal(size=(8, 1))).astype(np.float32)
if scenario == "nonfinite":
    y[80:84] = np.nan  # step 21
    x[120:124, 0] = np.inf  # step 31
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01)))


def event_file_size():
    for folder, _, names in os.walk(log_dir):
        for name in names:
            if "tfevents" in name:
                return os.path.getsize(os.path.join(folder, name))
    return 0


class Steps(Callback):
    # Reports progress, and injects the scenario's fault at a chosen step.
    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        step = cb.cur_step_num
        if scenario == "disk_full" and step == 8:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
            limit = event_file_size() + 2500
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            print(f"limit {limit}", flush=True)
        print(f"step {step}", flush=True)
        if scenario == "keyboard_interrupt" and step == 21:
            raise KeyboardInterrupt
        if scenario in ("sigint", "sigkill"):
            time.sleep(0.05)


class Corrupt(Callback):
    # Another callback leaving something the monitor cannot read in net_outputs.
    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num == 10:
            cb.net_outputs = ("not a tensor", None)


def failing_analysis(run):
    raise RuntimeError("analysis exploded")


options = dict(collect_freq=2, weight_freq=8, histogram_freq=16, analyze_every=2)
if scenario == "unwritable":
    blocker = os.path.join(log_dir, "a-file")
    os.makedirs(log_dir, exist_ok=True)
    open(blocker, "w").close()
    log_dir = os.path.join(blocker, "logs")  # a folder cannot be made inside a file
if scenario == "analysis_exception":
    options["analyze"] = failing_analysis
if scenario == "sigkill":
    options["flush_secs"] = 0.2
monitor = HealthMonitor(log_dir, **options)
callbacks = [Corrupt(), monitor, Steps()] if scenario == "hook_exception" else [monitor, Steps()]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.train(1, data, callbacks=callbacks, dataset_sink_mode=False)
messages = [str(w.message) for w in caught if "tb-health" in str(w.message)]
print("result " + json.dumps({"warnings": messages}), flush=True)
"""

SCENARIOS = ["disk_full", "unwritable", "nonfinite", "hook_exception", "analysis_exception", "keyboard_interrupt",
             "sigint", "sigkill"]


class Training:
    """One scenario's subprocess, its step lines as they come, its result."""

    def __init__(self, scenario: str, workdir: Path) -> None:
        self.scenario = scenario
        self.log_dir = workdir / "logs"
        workdir.mkdir(parents=True)
        env = dict(os.environ, PYTHONPATH=str(REPO), GLOG_v="3")
        self.process = subprocess.Popen(
            [sys.executable, "-c", TRAINING, scenario, str(self.log_dir)], cwd=workdir,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )
        self.lines: list[str] = []
        self.stderr = ""
        self.reached: dict[int, threading.Event] = {}
        self._reader = threading.Thread(target=self._follow, daemon=True)
        self._err_reader = threading.Thread(target=self._errors, daemon=True)
        self._reader.start()
        self._err_reader.start()

    def _follow(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.strip())
            if line.startswith("step "):
                step = int(line.split()[1])
                for wanted, event in list(self.reached.items()):
                    if step >= wanted:
                        event.set()

    def _errors(self) -> None:
        self.stderr = self.process.stderr.read()

    def signal_at(self, step: int, signum: int, delay_s: float = 0.0) -> None:
        event = self.reached.setdefault(step, threading.Event())

        def send() -> None:
            if event.wait(TIMEOUT_S) and self.process.poll() is None:
                time.sleep(delay_s)
                os.kill(self.process.pid, signum)

        threading.Thread(target=send, daemon=True).start()

    def wait(self) -> int:
        try:
            code = self.process.wait(timeout=TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(timeout=10)
        self._err_reader.join(timeout=10)
        return code

    @property
    def steps_trained(self) -> int:
        steps = [int(line.split()[1]) for line in self.lines if line.startswith("step ")]
        return max(steps, default=0)

    @property
    def result(self) -> dict:
        (line,) = [line for line in self.lines if line.startswith("result ")]
        return json.loads(line.removeprefix("result "))


@pytest.fixture(scope="module")
def trainings(tmp_path_factory) -> dict[str, Training]:
    root = tmp_path_factory.mktemp("hook_faults")
    started = {name: Training(name, root / name) for name in SCENARIOS}
    started["sigint"].signal_at(20, signal.SIGINT)
    started["sigkill"].signal_at(30, signal.SIGKILL, delay_s=0.6)
    codes = {name: training.wait() for name, training in started.items()}
    for name, training in started.items():
        training.returncode = codes[name]
    yield started


def finished(training: Training) -> dict:
    assert training.returncode == 0, training.stderr[-3000:]
    assert training.steps_trained == STEPS
    return training.result


def read_only_run(training: Training):
    (run,) = read_logdir(training.log_dir)
    assert run.name == "rank_0"
    return run


def assert_collected_prefix(run, tag: str = "train/loss") -> list[int]:
    steps = run.scalars[tag].steps.tolist()
    assert steps == [1, *range(2, 2 * len(steps) - 1, 2)], f"{tag} steps are not a prefix: {steps}"
    return steps


def test_disk_full_mid_training(trainings):
    training = trainings["disk_full"]
    result = finished(training)
    (warning,) = result["warnings"]
    assert "cannot write health logs" in warning and "training continues" in warning
    assert "Exception in thread" not in training.stderr and "Traceback" not in training.stderr, training.stderr[-2000:]
    run = read_only_run(training)
    steps = assert_collected_prefix(run)
    assert steps[-1] >= 8, "what was written before the disk filled is readable"
    assert steps[-1] < STEPS, "the limit really cut the log"
    assert run.skipped_records == 0  # a record cut by the full disk is not damage
    limit = int(next(line for line in training.lines if line.startswith("limit ")).split()[1])
    (path,) = [p for p in (training.log_dir / "rank_0").iterdir() if "tfevents" in p.name]
    assert path.stat().st_size <= limit


def test_unwritable_log_dir(trainings):
    result = finished(trainings["unwritable"])
    (warning,) = result["warnings"]
    assert "cannot write health logs" in warning
    assert "Exception in thread" not in trainings["unwritable"].stderr and "Traceback" not in trainings["unwritable"].stderr


def test_nan_and_inf_batches(trainings):
    training = trainings["nonfinite"]
    result = finished(training)
    run = read_only_run(training)
    steps = assert_collected_prefix(run)
    assert steps[-1] == STEPS
    counts = dict(zip(run.scalars["train/nonfinite_count"].steps.tolist(),
                      run.scalars["train/nonfinite_count"].values.tolist(), strict=True))
    assert counts[22] > 0 and counts[32] > 0 and counts[2] == 0
    loss_max = dict(zip(run.scalars["train/loss_max"].steps.tolist(), run.scalars["train/loss_max"].values.tolist(),
                        strict=True))
    assert not np.isfinite(loss_max[22])
    assert not any("stopped logging" in w for w in result["warnings"])


def test_an_unreadable_step_output_skips_that_step_only(trainings):
    """Another callback leaves garbage in `net_outputs` at step 10: that step is skipped with one
    warning, and logging goes on from step 11 (nothing a hook is handed may stop training)."""
    training = trainings["hook_exception"]
    result = finished(training)
    (warning,) = result["warnings"]
    assert "log_step at step 10 skipped" in warning and "training continues" in warning
    run = read_only_run(training)
    assert run.scalars["train/loss"].steps.tolist() == [1, *range(2, 10, 2), *range(12, STEPS + 1, 2)]


def test_an_exception_inside_the_online_analysis(trainings):
    training = trainings["analysis_exception"]
    finished(training)
    assert "analysis exploded" in training.stderr
    run = read_only_run(training)
    assert assert_collected_prefix(run)[-1] == STEPS  # logging goes on without the analysis


def test_keyboard_interrupt_from_a_callback_stops_training_and_closes_the_logs(trainings):
    training = trainings["keyboard_interrupt"]
    assert training.returncode in (1, -signal.SIGINT) and "KeyboardInterrupt" in training.stderr
    assert training.steps_trained == 21
    run = read_only_run(training)
    assert assert_collected_prefix(run)[-1] == 20 and run.skipped_records == 0
    # the monitor was closed on the way out: the partial window up to the interrupt is written
    assert run.scalars["train/loss_max"].steps[-1] == 21


def test_sigint_stops_training_as_asked_with_logs_readable_up_to_it(trainings):
    """MindSpore 2.9 turns SIGINT into termination by SIGTERM (no KeyboardInterrupt reaches Python),
    so nothing can close the logs; TensorBoard's writer appends each record as it goes, so the
    logs still reach the interrupt."""
    training = trainings["sigint"]
    assert training.returncode in (1, -signal.SIGINT, -signal.SIGTERM), training.stderr[-2000:]
    assert 20 <= training.steps_trained < STEPS
    run = read_only_run(training)
    steps = assert_collected_prefix(run)
    assert training.steps_trained - 4 <= steps[-1] <= training.steps_trained and run.skipped_records == 0


def test_sigkill_leaves_what_was_flushed_readable(trainings):
    training = trainings["sigkill"]
    assert training.returncode == -signal.SIGKILL
    assert 30 <= training.steps_trained < STEPS
    run = read_only_run(training)
    steps = assert_collected_prefix(run)
    assert steps[-1] >= 20 and run.skipped_records == 0
    assert sorted(scalars(training.log_dir / "rank_0")["train/loss"]) == steps  # TensorBoard agrees
