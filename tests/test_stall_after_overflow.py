"""A run that blew up into Inf during its warm-up, recovered, and then sat at chance level is
stalled as well as non-finite: the overflow's finite edges are the non-finite event, not a
divergence that keeps the stall from being judged (zoo_seen26_122, zoo_seen24_047)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.detection import zoo_labels
from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.engine import analyze_runs
from tb_health_plugin.analysis.render import render_finding
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries

STEPS = 400
RATE = 0.19
# zoo_seen26_122's first 14 steps: 2.2 untrained, then up to 70, Inf at three of them
BLOW_UP = [7.3, 2.8, 35.3, 69.9, 21.1, 19.2, 15.1, np.inf, 31.9, np.inf, 31.8, np.inf, 25.0]


def stuck_after_a_blow_up(seed: int, overflow: bool = True) -> np.ndarray:
    """An 8-class classifier at chance level for the whole run (log-normal noise of 5%) but for
    a blow-up in steps 2-14, into Inf when `overflow`, else a finite one of the same height."""
    rng = np.random.default_rng(seed)
    loss = np.log(8.0) * np.exp(0.05 * rng.standard_normal(STEPS))
    blow_up = np.array(BLOW_UP)
    loss[1 : 1 + blow_up.size] = blow_up if overflow else np.where(np.isfinite(blow_up), blow_up, 30.0)
    return loss


def alarms(loss: np.ndarray, interval: int) -> set[str]:
    steps = np.arange(1, STEPS + 1)[interval - 1 :: interval]
    scalars = {
        "train/loss": ScalarSeries.from_lists(steps, loss[steps - 1]),
        "train/lr": ScalarSeries.from_lists(steps, np.full(steps.size, RATE)),
    }
    (report,) = analyze_runs([RunData("run", scalars=scalars)])
    return {f["kind"] for f in report["findings"] if f["severity"] in ("warning", "critical")}


def labels(loss: np.ndarray) -> set[str]:
    found, _ = zoo_labels.label_run(loss, np.ones(STEPS), lambda k, persistent=True, nonfinite=False: k + 1,
                                    lr=np.full(STEPS, RATE))
    return set(found)


@pytest.mark.parametrize("seed", range(3))
def test_a_run_stuck_after_an_overflow_in_its_warm_up_is_stalled_too(seed):
    """Fails before: the rise around the Inf steps was found as a divergence (said as part of
    the non-finite finding), and a run with a divergence was never judged for a stall."""
    loss = stuck_after_a_blow_up(seed)
    assert labels(loss) == {"nonfinite", "stalled_convergence"}
    assert alarms(loss, 1) == {"nonfinite", "stalled_convergence"}


@pytest.mark.parametrize("seed", range(3))
def test_the_same_blow_up_without_an_overflow_is_a_divergence_and_no_stall(seed):
    """Weights that went through a finite state far worse than their initialisation diverged
    (the zoo's rule 2); a run that diverged is not also called stalled."""
    loss = stuck_after_a_blow_up(seed, overflow=False)
    assert labels(loss) == {"divergence"}
    assert alarms(loss, 1) == {"divergence"}


def test_the_stall_after_an_overflow_names_the_blow_up_and_its_advice_in_both_languages():
    """The flat run's advice (gradients that do not reach the parameters, a rate far too small)
    points the wrong way after a blow-up that a rate too high caused."""
    loss = stuck_after_a_blow_up(0)
    steps = np.arange(1, STEPS + 1)
    signals = RunSignals.from_run(RunData("run", scalars={
        "train/loss": ScalarSeries.from_lists(steps, loss),
        "train/lr": ScalarSeries.from_lists(steps, np.full(STEPS, RATE)),
    }))
    (stall,) = [f for f in check_loss_curve(signals) if f.kind == "stalled_convergence"]
    assert stall.message == "stalled.from_start.after_blow_up" and stall.args["blow_up_step"] == 9
    english = render_finding(stall, "en")["message"]
    assert "since it blew up into NaN/Inf at step 9" in english and "too small" not in english
    assert "第 9 步" in render_finding(stall, "zh")["message"]
