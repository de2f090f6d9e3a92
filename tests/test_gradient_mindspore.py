"""Vanishing and exploding gradients in networks trained for real with MindSpore on the CPU.

The trainings run in a subprocess (see `bench.detection.cases_signals.train_specs`): MindSpore's
protobuf modules cannot share a process with TensorBoard's, and the subprocess works in a
scratch folder. The logs are written as event files and read back with our readers. A healthy
network logged by the hooks is checked in `test_gradient_hooks_end_to_end.py`.
"""

from __future__ import annotations

import pytest

from bench.detection.cases_signals import _ms_series, train_specs
from bench.detection.events import write_scalars
from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.readers import read_logdir

STEPS = 60
SPECS = [
    dict(
        name="sigmoid_deep",
        scenario="vanishing",
        seed=7,
        depth=10,
        act="sigmoid",
        sigma=0.1,
        lr=0.1,
        lr_high=0.1,
        jump=STEPS,
        input_scale=1.0,
        log_every=1,
        steps=STEPS,
    ),
    dict(
        name="relu_lr_jump",
        scenario="exploding",
        seed=8,
        depth=6,
        act="relu",
        sigma=0.25,
        lr=0.01,
        lr_high=0.4,
        jump=30,
        input_scale=1.0,
        log_every=1,
        steps=STEPS,
    ),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("ms_runs")
    trained = train_specs(SPECS)
    for spec in SPECS:
        write_scalars(logdir / spec["name"], _ms_series(spec, trained[spec["name"]]))
    return {r["run"]: r for r in analyze_runs(read_logdir(logdir))}


def alarms(report, kind):
    return [f for f in report["findings"] if f["kind"] == kind and f["severity"] != "info"]


@pytest.mark.mindspore
def test_a_deep_sigmoid_stack_has_vanishing_gradients_in_its_first_layers(reports):
    found = alarms(reports["sigmoid_deep"], "vanishing_gradients")
    assert found and found[0]["step"] == 0
    assert found[0]["tag"].startswith("grad_norm/layers.0.")
    assert found[0]["evidence"]["early_to_late_ratio"] < 1e-3


@pytest.mark.mindspore
def test_a_plain_relu_stack_at_a_too_high_learning_rate_explodes_right_after_the_jump(reports):
    found = alarms(reports["relu_lr_jump"], "exploding_gradients")
    assert found and 31 <= found[0]["step"] <= 34
    assert found[0]["severity"] == "critical"
