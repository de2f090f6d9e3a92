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
    rank_loss_departures,
    rank_time_outliers,
    step_time_regression,
)
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import is_samples_axis

MS_PER_SECOND = 1000.0


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


def step_time_check(signals: RunSignals) -> list[Event]:
    """A slowdown of the run's steps: an alarm when it lasted and cost a material share of the run."""
    series = _time_series(signals)
    if series is None:
        return []
    steps, values, tag, is_time = series
    wall = signals.data.scalars[tag].wall_times if tag in signals.data.scalars else None
    seconds_per_unit = 1 / MS_PER_SECOND if is_time else None
    slowdown = step_time_regression(values, steps, wall, seconds_per_unit, tag)
    return [] if slowdown is None else [slowdown]


def _median_after_warmup(values: np.ndarray, allow_zero: bool = False) -> float:
    values = values[np.isfinite(values) & ((values >= 0) if allow_zero else (values > 0))]
    if values.size == 0:
        return float("nan")
    return float(np.median(values[warmup_points(values.size) :]))


def _wall_ms_per_step(signals: RunSignals) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(steps, ms per step, tag) from the wall times between the logged points of the loss (or
    the first scalar with usable wall times)."""
    candidates = [signals.loss] if signals.loss is not None else []
    # tags on a samples axis (MindFormers' `... vs samples`) have sample counts for steps
    candidates += [signals.data.scalars[t] for t in sorted(signals.data.scalars) if not is_samples_axis(t)]
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


def slow_rank_findings(job: dict[str, RunSignals]) -> dict[str, list[Event]]:
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
    where = {name: (steps, tag) for name, (steps, _, tag) in series.items()}
    return {name: [event] for name, event in rank_time_outliers(medians, step_time, measure, where).items()}


def rank_loss_findings(job: dict[str, RunSignals]) -> dict[str, list[Event]]:
    """Ranks whose loss departs from the other ranks' (3 or more ranks)."""
    out: dict[str, list[Event]] = {}
    losses = {name: s.loss for name, s in job.items() if s.loss is not None and len(s.loss)}
    if len(losses) < 3:
        return out
    steps = np.unique(np.concatenate([s.steps for s in losses.values()]))
    aligned = {}
    for name, s in losses.items():
        row = np.full(steps.size, np.nan)
        row[np.searchsorted(steps, s.steps)] = s.values
        aligned[name] = row
    tags = {name: job[name].tag("loss") for name in losses}
    for name, event in rank_loss_departures(steps, aligned, tags).items():
        out.setdefault(name, []).append(event)
    return out


def rank_check(job: dict[str, RunSignals]) -> dict[str, list[Event]]:
    """Ranks whose per-rank time or loss departs from the other ranks'."""
    out = slow_rank_findings(job)
    for name, findings in rank_loss_findings(job).items():
        out.setdefault(name, []).extend(findings)
    return out

