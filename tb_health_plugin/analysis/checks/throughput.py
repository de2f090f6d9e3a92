"""`throughput` findings: a run slowing down, and a rank lagging or departing from its job.

Adapters over `detectors.throughput`. Step time is preferred (milliseconds; MindFormers'
`iteration-time` seconds are converted by `RunSignals`); with only a throughput logged, its
inverse (time per sample) is used, so "higher is slower" in both cases.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.robust_levels import warmup_points
from tb_health_plugin.analysis.detectors.throughput import (
    rank_loss_departures,
    rank_step_time_outliers,
    step_time_regression,
)
from tb_health_plugin.analysis.findings import Finding
from tb_health_plugin.analysis.signals import RunSignals

ADVICE_SLOWDOWN = (
    "Look for what changed at that step: data loading (workers, storage), host memory pressure, "
    "thermal throttling or a neighbour job, or growing Python-side state such as kept tensors."
)
ADVICE_RANK = (
    "Check that rank's device and host (clocks, temperature, memory, other processes) and its "
    "data shard; in synchronous training every rank waits for the slowest."
)
ADVICE_RANK_LOSS = (
    "Check that rank's data shard and its replica's state: ranks of one job should see losses of "
    "the same size."
)


def _time_series(signals: RunSignals) -> tuple[np.ndarray, np.ndarray, str, bool] | None:
    """(steps, seconds-like values, tag, is_step_time) for the run, or None."""
    if signals.step_time_ms is not None and len(signals.step_time_ms):
        s = signals.step_time_ms
        return s.steps, s.values, signals.tag("step_time_ms"), True
    if signals.throughput is not None and len(signals.throughput):
        s = signals.throughput
        with np.errstate(divide="ignore"):
            return s.steps, np.where(s.values > 0, 1.0 / s.values, np.nan), signals.tag("throughput"), False
    return None


def step_time_check(signals: RunSignals) -> list[Finding]:
    """A lasting slowdown of the run's steps."""
    series = _time_series(signals)
    if series is None:
        return []
    steps, values, tag, is_time = series
    slowdown = step_time_regression(values)
    if slowdown is None:
        return []
    step = int(steps[slowdown.index])
    e = dict(slowdown.evidence)
    if is_time:
        what = f"Steps take {slowdown.ratio:.2f}x longer from step {step} ({e['median_before']:.3g} -> {e['median_after']:.3g} ms)."
    else:
        what = (
            f"Throughput dropped {slowdown.ratio:.2f}x from step {step} "
            f"({1 / e['median_before']:.3g} -> {1 / e['median_after']:.3g} samples/s)."
        )
        e = {"throughput_before": 1 / e["median_before"], "throughput_after": 1 / e["median_after"], **e}
    e.update(what="regression", advice=ADVICE_SLOWDOWN)
    return [
        Finding(
            kind="throughput",
            severity=slowdown.severity,
            step=step,
            end_step=int(steps[-1]),
            tag=tag,
            message=f"{what} {ADVICE_SLOWDOWN}",
            evidence=e,
        )
    ]


def _median_after_warmup(values: np.ndarray) -> float:
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return float("nan")
    return float(np.median(values[warmup_points(values.size) :]))


def rank_check(job: dict[str, RunSignals]) -> dict[str, list[Finding]]:
    """Ranks whose step time (or time per sample) or loss departs from the other ranks'."""
    out: dict[str, list[Finding]] = {}
    series = {name: _time_series(s) for name, s in job.items()}
    series = {name: s for name, s in series.items() if s is not None}
    kinds = {s[3] for s in series.values()}
    if len(series) >= 2 and len(kinds) == 1:
        medians = {name: _median_after_warmup(s[1]) for name, s in series.items()}
        for name, evidence in rank_step_time_outliers(medians).items():
            steps, _, tag, is_time = series[name]
            unit = "step time" if is_time else "time per sample"
            out.setdefault(name, []).append(
                Finding(
                    kind="throughput",
                    severity="warning",
                    step=int(steps[min(warmup_points(len(steps)), len(steps) - 1)]),
                    end_step=int(steps[-1]),
                    tag=tag,
                    message=(
                        f"This rank's {unit} is {evidence['slowdown']:.2f}x the other ranks' median. {ADVICE_RANK}"
                    ),
                    evidence=dict(evidence, what="slow_rank", ranks=len(series), advice=ADVICE_RANK),
                )
            )
    losses = {name: s.loss for name, s in job.items() if s.loss is not None and len(s.loss)}
    if len(losses) >= 3:
        steps = np.unique(np.concatenate([s.steps for s in losses.values()]))
        aligned = {}
        for name, s in losses.items():
            row = np.full(steps.size, np.nan)
            row[np.searchsorted(steps, s.steps)] = s.values
            aligned[name] = row
        for name, (index, evidence) in rank_loss_departures(steps, aligned).items():
            step = int(steps[index])
            out.setdefault(name, []).append(
                Finding(
                    kind="throughput",
                    severity="warning",
                    step=step,
                    end_step=int(steps[-1]),
                    tag=job[name].tag("loss"),
                    message=(
                        f"This rank's loss departs from the other ranks' from step {step} "
                        f"(by {100 * evidence['median_relative_deviation']:.0f}%). {ADVICE_RANK_LOSS}"
                    ),
                    evidence=dict(evidence, what="rank_loss", ranks=len(losses), advice=ADVICE_RANK_LOSS),
                )
            )
    return out


RUN_CHECKS = [step_time_check]
JOB_CHECKS = [rank_check]
