"""`throughput` findings: a run slowing down, and a rank lagging or departing from its job.

Adapters over `detectors.throughput`. Step time is preferred (milliseconds; MindFormers'
`iteration-time` seconds are converted by `RunSignals`); with only a throughput logged, its
inverse (time per sample) is used, so "higher is slower" in both cases. A slowdown is an alarm
only when it lasted and cost a material share of the run (see the detector), `info` otherwise.

Across ranks the measure is, in order: the hooks' `train/host_time_ms` (time outside the compiled
step, the only per-rank time that differs in synchronous data parallelism), step time (or time
per sample), and the wall time between logged steps.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.robust_levels import warmup_points
from tb_health_plugin.analysis.detectors.throughput import (
    MATERIAL_SHARE,
    rank_loss_departures,
    rank_time_outliers,
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
ADVICE_HOST = (
    "Check that rank's data loading (workers, storage, its shard) and host-side work (callbacks, "
    "logging, CPU contention): in synchronous training every rank waits for it."
)
MS_PER_SECOND = 1000.0
MEASURE_LABELS = {
    "host_time": "time outside the compiled step (data loading, host work)",
    "step_time": "step time",
    "time_per_sample": "time per sample",
    "wall_time": "wall time per step",
}
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
    """A slowdown of the run's steps: an alarm when it lasted and cost a material share of the run."""
    series = _time_series(signals)
    if series is None:
        return []
    steps, values, tag, is_time = series
    wall = signals.data.scalars[tag].wall_times if tag in signals.data.scalars else None
    seconds_per_unit = 1 / MS_PER_SECOND if is_time else None
    slowdown = step_time_regression(values, steps, wall, seconds_per_unit)
    if slowdown is None:
        return []
    step = int(steps[slowdown.index])
    e = dict(slowdown.evidence)
    if is_time:
        what = f"Steps take {slowdown.ratio:.2f}x longer from step {step} ({e['median_before']:.3g} -> {e['median_after']:.3g} ms)"
    else:
        what = (
            f"Throughput dropped {slowdown.ratio:.2f}x from step {step} "
            f"({1 / e['median_before']:.3g} -> {1 / e['median_after']:.3g} samples/s)"
        )
        e = {"throughput_before": 1 / e["median_before"], "throughput_after": 1 / e["median_after"], **e}
    cost = f"{_cost_text(e)}."
    if slowdown.severity == "info":
        cost += f" {_why_not_alarm(e)}"
        advice = ""
    else:
        advice = ADVICE_SLOWDOWN
    e.update(what="regression", advice=advice)
    return [
        Finding(
            kind="throughput",
            severity=slowdown.severity,
            step=step,
            end_step=int(steps[-1]),
            tag=tag,
            message=f"{what}, {cost} {advice}".strip(),
            evidence=e,
        )
    ]


def _cost_text(e: dict) -> str:
    lost = f"costing {100 * e['lost_share']:.1f}% of the run's time"
    if "lost_seconds" in e:
        lost += f" ({e['lost_seconds']:.3g} s)"
    if "slow_seconds" in e:
        lost += f" over {e['slow_seconds']:.3g} s"
    return lost


def _why_not_alarm(e: dict) -> str:
    if e["lost_share"] < MATERIAL_SHARE:
        return f"Below {100 * MATERIAL_SHARE:.0f}% of the run, within the usual variation of a run's time: no alarm."
    return (
        f"It lasted under {e['sustained_seconds']:.0f} s, as passing load on the host does (checkpointing, "
        "evaluation, another process): no alarm."
    )


def _median_after_warmup(values: np.ndarray, allow_zero: bool = False) -> float:
    values = values[np.isfinite(values) & ((values >= 0) if allow_zero else (values > 0))]
    if values.size == 0:
        return float("nan")
    return float(np.median(values[warmup_points(values.size) :]))


def _wall_ms_per_step(signals: RunSignals) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(steps, ms per step, tag) from the wall times between the logged points of the loss (or
    the first scalar with usable wall times)."""
    candidates = [signals.loss] if signals.loss is not None else []
    candidates += [signals.data.scalars[t] for t in sorted(signals.data.scalars)]
    for series in candidates:
        if series is None or len(series) < 3:
            continue
        step_gaps = np.diff(series.steps).astype(np.float64)
        wall_gaps = np.diff(series.wall_times)
        ok = (step_gaps > 0) & np.isfinite(wall_gaps) & (wall_gaps >= 0)
        if ok.sum() >= 2 and wall_gaps[ok].sum() > 0:
            tag = next(t for t, s in signals.data.scalars.items() if s is series)
            return series.steps[1:][ok], MS_PER_SECOND * wall_gaps[ok] / step_gaps[ok], tag
    return None


def _rank_measure(job: dict[str, RunSignals]) -> tuple[str, dict[str, tuple[np.ndarray, np.ndarray, str]]]:
    """The per-rank time every rank of the job has, best first (see module doc)."""
    host = {n: s.host_time_ms for n, s in job.items() if s.host_time_ms is not None and len(s.host_time_ms)}
    if len(host) == len(job):
        return "host_time", {n: (h.steps, h.values, job[n].tag("host_time_ms")) for n, h in host.items()}
    timed = {name: _time_series(s) for name, s in job.items()}
    if all(t is not None for t in timed.values()) and len({t[3] for t in timed.values()}) == 1:
        measure = "step_time" if next(iter(timed.values()))[3] else "time_per_sample"
        return measure, {n: t[:3] for n, t in timed.items()}
    walls = {name: _wall_ms_per_step(s) for name, s in job.items()}
    if all(w is not None for w in walls.values()):
        return "wall_time", walls
    return "", {}


def _job_step_time(job: dict[str, RunSignals]) -> float | None:
    """The job's typical step time in ms: median over ranks of their median step time."""
    medians = []
    for signals in job.values():
        series = _time_series(signals)
        if series is not None and series[3]:
            medians.append(_median_after_warmup(series[1]))
        else:
            wall = _wall_ms_per_step(signals)
            if wall is not None:
                medians.append(_median_after_warmup(wall[1]))
    medians = [m for m in medians if np.isfinite(m) and m > 0]
    return float(np.median(medians)) if medians else None


def slow_rank_findings(job: dict[str, RunSignals]) -> dict[str, list[Finding]]:
    """Ranks whose per-rank time lags the other ranks' by a material share of the step."""
    measure, series = _rank_measure(job)
    if len(series) < 2:
        return {}
    step_time = None
    if measure == "host_time":
        step_time = _job_step_time(job)
        if step_time is None:
            return {}
    medians = {name: _median_after_warmup(values, allow_zero=measure == "host_time") for name, (_, values, _) in series.items()}
    out: dict[str, list[Finding]] = {}
    for name, evidence in rank_time_outliers(medians, step_time).items():
        steps, _, tag = series[name]
        advice = ADVICE_HOST if measure == "host_time" else ADVICE_RANK
        label = MEASURE_LABELS[measure]
        if measure == "host_time":
            what = (
                f"This rank spends {evidence['median']:.3g} ms a step outside the compiled step against "
                f"{evidence['others_median']:.3g} ms on the other ranks: {100 * evidence['lost_share']:.0f}% of "
                f"the job's {step_time:.3g} ms step."
            )
        else:
            what = f"This rank's {label} is {evidence['slowdown']:.2f}x the other ranks' median."
        out[name] = [
            Finding(
                kind="throughput",
                severity="warning",
                step=int(steps[min(warmup_points(len(steps)), len(steps) - 1)]),
                end_step=int(steps[-1]),
                tag=tag,
                message=f"{what} {advice}",
                evidence=dict(
                    evidence, what="slow_rank", measure=measure, job_step_time_ms=step_time, ranks=len(series), advice=advice
                ),
            )
        ]
    return out


def rank_loss_findings(job: dict[str, RunSignals]) -> dict[str, list[Finding]]:
    """Ranks whose loss departs from the other ranks' (3 or more ranks)."""
    out: dict[str, list[Finding]] = {}
    losses = {name: s.loss for name, s in job.items() if s.loss is not None and len(s.loss)}
    if len(losses) < 3:
        return out
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


def rank_check(job: dict[str, RunSignals]) -> dict[str, list[Finding]]:
    """Ranks whose per-rank time or loss departs from the other ranks'."""
    out = slow_rank_findings(job)
    for name, findings in rank_loss_findings(job).items():
        out.setdefault(name, []).extend(findings)
    return out


RUN_CHECKS = [step_time_check]
JOB_CHECKS = [rank_check]
