"""Per-layer gradient norms at steps whose loss is NaN/Inf are left out, not read as overflow.

A float16 run under dynamic loss scaling logs a non-finite loss at the steps its scale is
searched (zoo_seen19_109, a real training of the benchmark's zoo: Inf at 75 of its 273 steps,
steps 2-31 among them). The per-layer check used to pass those points to the detectors as NaN
norms, which `gradient_norms.exploding` reads as overflowed ones: every layer "overflowed" from
step 2, and the check failed (an all-NaN baseline), losing the run's layer findings.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.gradients import gradient_check
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

STEPS = np.arange(1, 274)


def run_with_loss_scale_search(seed: int = 0) -> RunSignals:
    rng = np.random.default_rng(seed)
    loss = 2.2 * np.exp(-STEPS / 200) * np.exp(0.05 * rng.standard_normal(STEPS.size))
    overflowed = (STEPS >= 2) & (STEPS <= 31) | (rng.random(STEPS.size) < 0.18)
    loss[overflowed] = np.inf
    scalars = {"train/loss": ScalarSeries.from_lists(STEPS, loss)}
    for depth, scale in enumerate((1e-3, 1e-2, 1e-1)):  # steady norms, smaller in the first layers
        for name in ("weight", "bias"):
            norms = scale * np.exp(0.1 * rng.standard_normal(STEPS.size))
            scalars[f"grad_norm/{depth}.{name}"] = ScalarSeries.from_lists(STEPS, norms)
    return RunSignals.from_run(RunData("run", scalars=scalars))


def test_layers_are_judged_on_the_steps_whose_loss_is_finite():
    for seed in range(3):
        found = gradient_check(run_with_loss_scale_search(seed))  # raised ValueError before
        assert "exploding_gradients" not in {f.kind for f in found}
