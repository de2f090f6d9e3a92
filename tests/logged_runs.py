"""One per-step run as a user's logs would show it: every `interval`-th step's value, or the mean
of each window of `interval` steps, with the learning rate at the logged steps; and the kinds
of its warning or critical findings."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.run_data import RunData, ScalarSeries


def logged(loss: np.ndarray, lr: np.ndarray, interval: int, means: bool) -> RunSignals:
    points = loss.size // interval
    last = np.arange(1, points + 1) * interval - 1
    values = loss[: points * interval].reshape(points, interval).mean(axis=1) if means else loss[last]
    scalars = {
        "train/loss": ScalarSeries.from_lists(last + 1, values),
        "train/lr": ScalarSeries.from_lists(last + 1, lr[last]),
    }
    return RunSignals.from_run(RunData("run", scalars=scalars))


def kinds(loss: np.ndarray, lr: np.ndarray, interval: int, means: bool) -> set[str]:
    """The kinds of the loss checks' warning and critical findings on the run so logged."""
    found = check_loss_curve(logged(loss, lr, interval, means))
    return {f.kind for f in found if f.severity in ("warning", "critical")}
