"""MindSpore summary files from a real CPU training (SummaryCollector and SummaryRecord)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tb_health_plugin.readers import LogdirReader, read_logdir
from tb_health_plugin.readers.records import scan_records
from tb_health_plugin.readers.schema import MS_MESSAGES, MsEvent
from tests.readers_fixtures import mindspore_training_logs, run_mindspore_script

pytestmark = pytest.mark.mindspore

DESCRIBE_SCHEMA = """
import json
from mindspore.train import summary_pb2, anf_ir_pb2  # before protobuf: MindSpore picks its backend
from google.protobuf import descriptor_pb2
out = {}
def walk(message, prefix):
    for field in message.field:
        out[prefix + message.name + "." + field.name] = [field.number, field.label, field.type]
    for nested in message.nested_type:
        walk(nested, prefix + message.name + ".")
for module in (summary_pb2, anf_ir_pb2):
    file_proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(file_proto)
    for message in file_proto.message_type:
        walk(message, "")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def mindspore_logs(tmp_path_factory) -> Path:
    return mindspore_training_logs(tmp_path_factory)


def _raw_steps(path: Path) -> list[int]:
    data = path.read_bytes()
    scan = scan_records(data)
    events = [MsEvent.FromString(data[s : s + n]) for s, n in zip(scan.starts, scan.lengths, strict=True)]
    return [e.step for e in events if e.HasField("summary")]


def test_summary_collector_loss_and_weight_histograms(mindspore_logs):
    runs = {run.name: run for run in read_logdir(mindspore_logs)}
    assert set(runs) == {"collector", "record"}  # the _lineage file is no run of its own
    collector = runs["collector"]
    assert collector.skipped_records == 0 and collector.backtracks == []
    loss = collector.scalars["loss/auto"]
    assert set(collector.scalars) == {"loss/auto"}  # the lineage file holds no series
    assert np.all(np.diff(loss.steps) > 0) and loss.steps[-1] == 16
    assert np.all(np.isfinite(loss.values))
    (summary_file,) = (mindspore_logs / "collector").glob("*_MS")
    raw = _raw_steps(summary_file)
    assert len(raw) > len(set(raw))  # MindSpore writes the epoch-end step twice ...
    np.testing.assert_array_equal(loss.steps, sorted(set(raw)))  # ... and it counts once
    weight = collector.histograms["weight/auto"]
    assert len(weight) == len(loss)
    assert all(b[:, 2].sum() == 4 for b in weight.buckets)  # Dense(4, 1) has 4 weights
    assert all(np.all(b[:, 1] >= b[:, 0]) for b in weight.buckets)
    assert collector.histograms["bias/auto"].buckets[0][:, 2].sum() == 1


def test_summary_record_scalars_histograms_with_nonfinite_counts_and_tensors(mindspore_logs):
    (run,) = read_logdir(mindspore_logs / "record")
    np.testing.assert_allclose(run.scalars["loss"].values, [1.0 / s for s in range(1, 6)], rtol=1e-6)
    np.testing.assert_array_equal(run.scalars["lr"].values, [0.5] * 5)  # a one-number tensor is a scalar
    w = run.histograms["w"]
    np.testing.assert_array_equal(w.nan_counts, [1] * 5)
    np.testing.assert_array_equal(w.inf_counts, [2] * 5)
    assert w.buckets[0][:, 2].sum() == 3 and w.buckets[0][0, 0] == 1.0 and w.buckets[0][-1, 1] == 3.0
    t = run.histograms["t"]  # a full tensor becomes a histogram of its values
    assert t.buckets[0][:, 2].sum() == 6 and t.buckets[0][0, 0] == 0.0 and t.buckets[0][-1, 1] == 5.0


def test_truncated_and_corrupted_mindspore_files(mindspore_logs, tmp_path):
    (source,) = (mindspore_logs / "record").glob("*_MS")
    data = source.read_bytes()
    scan = scan_records(data)
    live = tmp_path / "live"
    live.mkdir()
    target = live / source.name
    target.write_bytes(data[: int(scan.starts[-1]) + 10])
    reader = LogdirReader(live)
    reader.refresh()
    assert reader.run(".").skipped_records == 0 and reader.run(".").scalars["loss"].steps[-1] == 4
    target.chmod(0o600)
    target.write_bytes(data)
    reader.refresh()
    assert reader.run(".").scalars["loss"].steps[-1] == 5
    damaged = bytearray(data)
    damaged[int(scan.starts[2]) + 20] ^= 0xFF
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / source.name).write_bytes(bytes(damaged))
    (run,) = read_logdir(broken)
    assert run.skipped_records == 1 and len(run.scalars["loss"]) == 4


def test_our_schema_matches_mindsporess_wire_format(tmp_path):
    theirs = json.loads(run_mindspore_script(DESCRIBE_SCHEMA, tmp_path).strip().splitlines()[-1])
    for path, fields in MS_MESSAGES.items():
        if path == "EventBatch":
            continue
        for name, number, label, kind, _oneof, _packed in fields:
            their_number, their_label, their_type = theirs[f"{path}.{name}"]
            assert (number, label) == (their_number, their_label), f"{path}.{name}"
            # MindSpore's DataType enum travels as a varint, like our int32 (field type 5 vs enum 14).
            expected = {14: 5}.get(their_type, their_type) if not isinstance(kind, str) else 11
            assert expected == (kind if not isinstance(kind, str) else 11), f"{path}.{name}"


def test_shipped_proto_file_declares_the_schema_built_at_import():
    proto = (Path(__file__).parents[1] / "tb_health_plugin/readers/proto/mindspore_summary.proto").read_text()
    declared = {(m.group(1), int(m.group(2))) for m in re.finditer(r"\b(\w+) = (\d+)", proto)}
    built = {(name, number) for fields in MS_MESSAGES.values() for name, number, *_ in fields}
    assert built == declared


def test_mindspore_summary_files_are_found_only_by_their_own_name(tmp_path, mindspore_logs):
    (source,) = (mindspore_logs / "record").glob("*_MS")
    run_dir = tmp_path / "copy"
    run_dir.mkdir()
    shutil.copy(source, run_dir / source.name)
    shutil.copy(source, run_dir / "renamed_summary_file")
    (run,) = read_logdir(tmp_path)
    assert len(run.scalars["loss"]) == 5 and run.backtracks == []
