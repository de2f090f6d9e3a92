"""Loss verdicts do not depend on where step numbering starts (a resumed job's numbering), nor
lose a divergence when only every 5th point was logged: the benchmark's synthetic dev runs."""

from __future__ import annotations

import numpy as np
import pytest

from bench.detection import cases_loss
from tb_health_plugin.analysis.checks.loss import check_loss_curve, check_nonfinite
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

SHAPE = cases_loss.SPLITS["dev"]
SCENARIOS = ("healthy", "spike", "stall", "ramp", "blowup")


def simulated_runs(per_scenario: int = 8):
    index = 0
    for scenario, count in SHAPE.counts.items():
        for k in range(count):
            rng = np.random.default_rng([SHAPE.seed, index])
            index += 1
            if scenario in SCENARIOS and k < per_scenario:
                yield f"{scenario}_{k}", cases_loss.simulate(scenario, rng, SHAPE)


def verdict(series: dict, name: str, offset: int = 0, keep_every: int = 1) -> set[tuple[str, str]]:
    scalars = {
        tag: ScalarSeries.from_lists(steps[keep_every - 1 :: keep_every] + offset, values[keep_every - 1 :: keep_every])
        for tag, (steps, values) in series.items()
    }
    signals = RunSignals.from_run(RunData(name, scalars=scalars))
    findings = check_nonfinite(signals) + check_loss_curve(signals)
    return {(f.kind, f.severity) for f in findings if f.severity in ("warning", "critical")}


RUNS = list(simulated_runs())


@pytest.mark.parametrize("name, run", RUNS, ids=[name for name, _ in RUNS])
def test_a_step_offset_of_100000_changes_no_verdict(name, run):
    assert verdict(run.series, name, offset=100_000) == verdict(run.series, name)


@pytest.mark.parametrize("name, run", [(n, r) for n, r in RUNS if "divergence" in r.expected],
                         ids=[n for n, r in RUNS if "divergence" in r.expected])
def test_a_divergence_is_still_found_when_only_every_fifth_point_was_logged(name, run):
    found = {kind for kind, _ in verdict(run.series, name)}
    if "divergence" not in found:
        pytest.skip("not found on every point either (a recall miss, not a sampling effect)")
    assert "divergence" in {kind for kind, _ in verdict(run.series, name, keep_every=5)}
