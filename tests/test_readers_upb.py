"""The readers give the same result under protobuf's upb backend as under its python backend.

The test session imports MindSpore first (tests/__init__.py), which puts protobuf in its
pure-python mode; users' processes (TensorBoard, `tb-health check`) get upb, where the batch
parsing matters most. So the same logdir is read in a clean subprocess and compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.readers_fixtures import mindspore_training_logs

pytestmark = pytest.mark.mindspore

DIGEST = """
import json, sys
import numpy as np
from google.protobuf.internal import api_implementation
from tb_health_plugin.readers import read_logdir

def plain(array):
    return [None if not np.isfinite(x) else float(x) for x in np.asarray(array, dtype=np.float64).reshape(-1)]

def digest(logdir):
    out = {}
    for run in read_logdir(logdir):
        out[run.name] = {
            "scalars": {t: [s.steps.tolist(), plain(s.values), s.wall_times.tolist()] for t, s in run.scalars.items()},
            "histograms": {t: [h.steps.tolist(), [plain(b) for b in h.buckets], h.nan_counts.tolist(),
                               h.inf_counts.tolist()] for t, h in run.histograms.items()},
            "texts": {t: [x.steps.tolist(), x.values] for t, x in run.texts.items()},
            "skipped": run.skipped_records,
            "backtracks": [[b.tag, b.from_step, b.to_step] for b in run.backtracks],
        }
    return {"backend": api_implementation.Type(), "runs": out}

if __name__ == "__main__":
    print(json.dumps(digest(sys.argv[1])))
"""


def _mixed_logdir(root: Path, mindspore_logs: Path) -> Path:
    import shutil

    import tensorboardX

    from tests.readers_fixtures import event, record_offsets, scalar_value, tensor_value, write_events

    logdir = root / "logdir"
    shutil.copytree(mindspore_logs, logdir / "ms")
    writer = tensorboardX.SummaryWriter(str(logdir / "tbx"))
    rng = np.random.default_rng(3)
    for step in range(60):
        writer.add_scalar("loss", float(rng.normal()), step)
        if step % 7 == 0:
            writer.add_histogram("weight/w", rng.normal(size=300), step)
            writer.add_text("note", f"at {step}", step)
    writer.close()
    events = [event(s, tensor_value("tf2/loss", np.float32(s), "scalars" if s == 0 else None),
                    scalar_value("lr", 0.1)) for s in range(30)]
    events += [event(s, scalar_value("lr", 0.2)) for s in range(10, 20)]  # a resume
    path = write_events(logdir / "tf2", events)
    data = bytearray(path.read_bytes())
    header, length = record_offsets(path)[5]
    data[header + 12 + length // 2] ^= 0xFF  # one damaged record
    path.write_bytes(bytes(data))
    return logdir


def test_upb_and_python_protobuf_backends_read_identically(tmp_path_factory, tmp_path):
    logdir = _mixed_logdir(tmp_path, mindspore_training_logs(tmp_path_factory))
    script = tmp_path / "digest.py"
    script.write_text(DIGEST)
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    done = subprocess.run([sys.executable, str(script), str(logdir)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    in_upb = json.loads(done.stdout)
    namespace: dict = {}
    exec(compile(DIGEST, "digest", "exec"), namespace)  # noqa: S102 - the same code, in this process
    here = namespace["digest"](str(logdir))
    assert in_upb["backend"] == "upb"
    assert set(in_upb["runs"]) == {"ms/collector", "ms/record", "tbx", "tf2"}
    assert in_upb["runs"] == here["runs"]
    assert in_upb["runs"]["tf2"]["skipped"] == 1 and in_upb["runs"]["tf2"]["backtracks"] == [["lr", 29, 10]]
