"""Real event files for the reader tests, written by TensorBoard's and tensorboardX's own writers.

Tensor summaries are built the way TF2's `tf.summary` writes them (a TensorProto plus summary
metadata naming the plugin, on the tag's first value only), without needing TensorFlow.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

WALL_TIME_START = 1_767_000_000.0


def scalar_value(tag: str, value: float) -> Summary.Value:
    return Summary.Value(tag=tag, simple_value=float(value))


def tensor_value(tag: str, array, plugin: str | None) -> Summary.Value:
    value = Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(np.asarray(array)))
    if plugin is not None:
        value.metadata.CopyFrom(SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=plugin)))
    return value


def legacy_histogram_value(tag: str, data: np.ndarray, edges: np.ndarray) -> Summary.Value:
    counts, _ = np.histogram(data, bins=edges)
    histo = HistogramProto(
        min=float(data.min()), max=float(data.max()), num=float(data.size), sum=float(data.sum()),
        sum_squares=float((data**2).sum()), bucket_limit=edges[1:].tolist(), bucket=counts.astype(float).tolist(),
    )
    return Summary.Value(tag=tag, histo=histo)


def event(step: int, *values: Summary.Value, wall_time: float | None = None) -> Event:
    wall = WALL_TIME_START + step if wall_time is None else wall_time
    return Event(wall_time=wall, step=step, summary=Summary(value=list(values)))


def write_events(run_dir: Path, events, suffix: str = "") -> Path:
    """Write events with TensorBoard's EventFileWriter; returns the file written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    before = set(glob.glob(str(run_dir / "*tfevents*")))
    writer = EventFileWriter(str(run_dir), filename_suffix=suffix)
    for item in events:
        writer.add_event(item)
    writer.close()
    (path,) = set(glob.glob(str(run_dir / "*tfevents*"))) - before
    return Path(path)


def write_scalar_run(run_dir: Path, series: dict[str, tuple[list[int], list[float]]], suffix: str = "") -> Path:
    events = [event(step, scalar_value(tag, value)) for tag, (steps, values) in series.items()
              for step, value in zip(steps, values, strict=True)]
    return write_events(run_dir, events, suffix)


def record_offsets(path: Path) -> list[tuple[int, int]]:
    """(header offset, payload length) of each record, read naively for the damage tests."""
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        offsets.append((pos, length))
        pos += 16 + length
    return offsets


def only_file(folder: Path, pattern: str = "*") -> Path:
    (path,) = [Path(p) for p in glob.glob(os.path.join(folder, pattern)) if os.path.isfile(p)]
    return path


# A real MindSpore CPU training, run in a subprocess: importing MindSpore switches protobuf to its
# pure-python backend, and importing it after protobuf's upb backend is loaded fails inside
# MindSpore's generated code.
MINDSPORE_TRAINING = """
import numpy as np, mindspore as ms, mindspore.dataset as ds
from mindspore import nn, Tensor
from mindspore.train import Model, SummaryCollector, SummaryRecord
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype(np.float32)
y = (x @ np.array([1, -2, 3, 0.5], np.float32))[:, None]
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
net = nn.Dense(4, 1)
model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))
# collect_dataset_graph crashes inside MindSpore 2.9 with protobuf >= 4 (mapInt assignment).
collector = SummaryCollector("logs/collector", collect_freq=2,
                             collect_specified_data={"collect_dataset_graph": False})
model.train(2, data, callbacks=[collector], dataset_sink_mode=False)
with SummaryRecord("logs/record") as record:
    for step in range(1, 6):
        record.add_value("scalar", "loss", Tensor(np.float32(1.0 / step)))
        record.add_value("histogram", "w", Tensor(np.array([1.0, 2.0, np.nan, np.inf, -np.inf, 3.0], np.float32)))
        record.add_value("tensor", "t", Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
        record.add_value("tensor", "lr", Tensor(np.array([0.5], np.float32)))
        record.record(step)
"""
_trained: dict[str, Path] = {}


def run_mindspore_script(script: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def mindspore_training_logs(tmp_path_factory) -> Path:
    """`logs/collector` (SummaryCollector) and `logs/record` (SummaryRecord); trained once per session."""
    if "logs" not in _trained:
        workdir = tmp_path_factory.mktemp("mindspore_training")
        run_mindspore_script(MINDSPORE_TRAINING, workdir)
        _trained["logs"] = workdir / "logs"
    return _trained["logs"]
