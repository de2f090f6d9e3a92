"""The detectors we compare against, run on the same cases.

- `losslint` (PyPI, 0.4.x): its own reader on the run's event files and its own checks
  (`losslint.parsing.load_run`, `losslint.checks.run_all_checks`), mapped to our kinds.
- Three published loss-spike rules, applied to the loss series our readers found:
  - OLMo-core: a point more than 6 standard deviations above the mean of the previous 128
    points (rolling z-score);
  - Megatron-LM: a loss above 10x the running maximum of the losses before it;
  - llm-foundry (kill-loss-spike callback): a loss above 2x the running mean of the previous
    window for 5 consecutive logged points.
  These rules are implemented from their published descriptions, vectorised here; each alarm
  is reported as a `loss_spike` at its step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

LOSSLINT_KINDS = {
    "nan_inf": "nonfinite",
    "divergence": "divergence",
    "loss_spike": "loss_spike",
    "stagnation": "stalled_convergence",
    "overfit_onset": "overfitting",
}


@dataclass(frozen=True)
class Alarm:
    kind: str
    step: int | None  # None when the tool does not say where


def losslint_alarms(run_folder: Path) -> list[Alarm]:
    """Every losslint finding on the event files of one run (any severity), mapped to our kinds."""
    from losslint.checks import run_all_checks
    from losslint.parsing import load_run

    alarms = []
    for path in sorted(run_folder.glob("*tfevents*")):
        try:
            log = load_run(path)
        except ValueError:
            continue
        for finding in run_all_checks(log):
            kind = LOSSLINT_KINDS.get(finding.check)
            if kind is None:
                continue
            steps = finding.details.get("steps") or [finding.details.get("since_step")]
            alarms.extend(Alarm(kind, None if s is None else int(s)) for s in steps)
    return alarms


def _previous_window(values: np.ndarray, window: int) -> np.ndarray:
    """Rows i = values[i - window : i] for i >= window (the points before point i)."""
    return sliding_window_view(values[:-1], window)


def olmo_zscore_alarms(steps: np.ndarray, values: np.ndarray, window: int = 128, sigmas: float = 6.0) -> list[Alarm]:
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if values.size <= window:
        return []
    past = _previous_window(values, window)
    mean, std = past.mean(axis=1), past.std(axis=1)
    current = values[window:]
    hit = current > mean + sigmas * np.maximum(std, 1e-12)
    return [Alarm("loss_spike", int(s)) for s in steps[window:][hit]]


def megatron_running_max_alarms(steps: np.ndarray, values: np.ndarray, factor: float = 10.0) -> list[Alarm]:
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if values.size < 2:
        return []
    running_max = np.maximum.accumulate(values)[:-1]
    hit = values[1:] > factor * running_max
    return [Alarm("loss_spike", int(s)) for s in steps[1:][hit]]


def foundry_running_mean_alarms(
    steps: np.ndarray, values: np.ndarray, window: int = 100, factor: float = 2.0, patience: int = 5
) -> list[Alarm]:
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if values.size <= window + patience:
        return []
    mean = _previous_window(values, window).mean(axis=1)
    above = values[window:] > factor * mean
    if above.size < patience:
        return []
    sustained = sliding_window_view(above, patience).all(axis=1)
    # The alarm fires on the patience-th consecutive point; report the first of them.
    return [Alarm("loss_spike", int(s)) for s in steps[window:][: sustained.size][sustained]]


RULES = {
    "olmo 6-sigma/128": olmo_zscore_alarms,
    "megatron 10x max": megatron_running_max_alarms,
    "foundry 2x mean/5": foundry_running_mean_alarms,
}
