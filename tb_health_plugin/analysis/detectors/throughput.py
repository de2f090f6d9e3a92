"""Step-time regressions within a run, and ranks that depart from the rest of their job.

Within a run (on log step time, or log of 1/throughput, after `warmup_points` for compilation):
the single best change point under an L1 cost (sum of absolute deviations from each segment's
median, the `l1` cost of ruptures' binary segmentation, robust to the periodic spikes of
evaluation and checkpointing), searched over splits leaving `MIN_SEGMENT_SHARE` of the points on
each side. A slow drift with no single change point is caught by comparing the last
`MIN_SEGMENT_SHARE` of the points with the first. It is a slowdown when the later segment's
median is `SLOWDOWN_WARNING` (1.25x) or more above the earlier one and a one-sided Mann-Whitney U
test rejects "no slower" at `P_VALUE`.

A slowdown is then weighed by what it cost, because a step-time series alone cannot tell a
regression of the job from a neighbour on a shared machine, and only the cost says whether
anybody should act:

* lost share: the wall-clock time the slow segment took beyond the earlier median (its rolling
  median level minus the baseline, times the steps each point stands for), over the whole run's
  time. A warning needs `MATERIAL_SHARE` (5%): a run's wall time on shared hardware varies by a
  few percent from one launch to the next (co-tenants, storage, network), so a smaller loss
  cannot be told from that variation and is not worth a person's investigation. It is about
  what the smallest slowdown found (1.25x) costs over a fifth of the run, and 5x the 1% below
  which no slowdown may raise an alarm. Critical from `CRITICAL_SHARE`
  (50%): the run took twice as long as its own earlier pace promised.
* duration: the slow segment must last `SUSTAINED_SECONDS` (60 s) of wall-clock time. The
  passing causes of slowness (a checkpoint write, an evaluation pass, a page-cache flush, another
  process's burst on the host) last seconds to a minute; a regression of the job is a state
  that stays. The duration comes from the step times when they are in known units, otherwise
  from the events' wall times; when neither gives seconds, only the share decides.

Otherwise the slowdown is `info`: it is reported with its figures and raises no alarm.

Across the `rank_<id>` runs of a job, per-rank time is compared with `rank_time_outliers`. In
synchronous data parallelism every rank's step time is the same (all wait for the slowest at the
collective), so the straggler shows only in the time it spends outside the compiled step (data
loading, host work: `train/host_time_ms`); without that tag, step time or the wall time between
logged steps is compared, which names a straggler only where ranks do not wait for each other.
* a rank's excess over the median of the other ranks' medians, as a share of the job's step
  time, must reach `MATERIAL_SHARE` (the same cost argument as above: that share of every step
  is lost by the whole job); it must also be `RANK_SLOWDOWN` (1.2x) the others' value and (with
  3 or more ranks) outside their spread by `RANK_MADS` median absolute deviations (the MAD
  floored at `MAD_FLOOR_SHARE` of the step time, 2%, so identical ranks do not make any jitter an
  outlier).
* loss (3 or more ranks, so the odd one out is identifiable): per step, each rank's relative
  deviation from the ranks' median loss, rolling-median smoothed; a rank departs when it stays
  above `RANK_LOSS_DEVIATION` (10%) and `RANK_LOSS_SPREADS` times the typical deviation of the
  ranks for `sustained_length(n, 0.1)` points. Ranks with a constant loss (pipeline stages that
  do not compute it) are left out.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.rank_sum import mann_whitney_p
from tb_health_plugin.analysis.detectors.robust import rolling_median
from tb_health_plugin.analysis.detectors.robust_levels import (
    first_sustained_run,
    median_window,
    sustained_length,
    warmup_points,
)
from tb_health_plugin.analysis.event import NOTHING, Event, Phrase

SLOWDOWN_WARNING = 1.25
MATERIAL_SHARE = 0.05
CRITICAL_SHARE = 0.5
SUSTAINED_SECONDS = 60.0
P_VALUE = 1e-3
MIN_SEGMENT_SHARE = 0.1
MIN_SEGMENT_POINTS = 5
MAX_POINTS = 600  # longer series are median-pooled to this many points before the search
RANK_SLOWDOWN = 1.2
RANK_MADS = 5.0
MAD_FLOOR_SHARE = 0.02
RANK_LOSS_DEVIATION = 0.1
RANK_LOSS_SPREADS = 5.0


def step_time_regression(
    step_time: np.ndarray,
    steps: np.ndarray | None = None,
    wall_time: np.ndarray | None = None,
    seconds_per_unit: float | None = None,
    tag: str = "",
) -> Event | None:
    """The best change point of a step-time series when it is a significant slowdown, weighed by
    its cost (see module doc): from the first slow point to the last point.

    `steps`: the logged step of each point (each point stands for the steps since the previous
    one; default: one step each, the points' indices). `seconds_per_unit`: seconds per step of a
    value of 1 (1e-3 for milliseconds), None when the values are not step times in known units
    but time per sample (the inverse of a throughput, also given as throughputs in the evidence);
    `wall_time`: the points' wall-clock times, used for the duration when the units are unknown.
    """
    values = np.asarray(step_time, dtype=np.float64)
    valid = np.flatnonzero(np.isfinite(values) & (values > 0))
    all_valid = valid
    warm = warmup_points(valid.size)
    valid = valid[warm:]
    min_points = max(MIN_SEGMENT_POINTS, int(np.ceil(MIN_SEGMENT_SHARE * valid.size)))
    if valid.size < 2 * min_points:
        return None
    logs = np.log(values[valid])
    found = _change_point(logs, min_points)
    if found is None:
        found = _gradual_change(logs, min_points)
    if found is None:
        return None
    onset, baseline, after, p_value, gradual = found
    ratio = float(np.exp(after - baseline))
    gaps = _step_gaps(values.size, steps)
    cost = _cost(values, gaps, all_valid, valid, logs, onset, baseline)
    duration = _slow_seconds(values, gaps, valid, onset, wall_time, seconds_per_unit)
    sustained = duration is None or duration >= SUSTAINED_SECONDS
    if not sustained or cost["lost_share"] < MATERIAL_SHARE:
        severity = "info"
    else:
        severity = "critical" if cost["lost_share"] >= CRITICAL_SHARE else "warning"
    evidence = {
        "median_before": float(np.exp(baseline)),
        "median_after": float(np.exp(after)),
        "slowdown": ratio,
        "p_value": p_value,
        "lost_share": cost["lost_share"],
        "slow_share": cost["slow_share"],
        "material_share": MATERIAL_SHARE,
    }
    if duration is not None:
        evidence.update(slow_seconds=duration, sustained_seconds=SUSTAINED_SECONDS)
        if seconds_per_unit is not None:
            evidence["lost_seconds"] = cost["lost_units"] * seconds_per_unit
    if gradual:
        evidence["gradual"] = True
    return _slowdown_event(int(valid[onset]), values.size - 1, ratio, severity, evidence, steps,
                           seconds_per_unit is not None, tag)


def _slowdown_event(index: int, last: int, ratio: float, severity: str, evidence: dict,
                    steps: np.ndarray | None, is_time: bool, tag: str) -> Event:
    """The slowdown from point `index` to point `last` at their logged steps (None: the indices).
    A slowdown that is not an alarm says why in its message (`why`)."""
    at = (lambda i: int(i)) if steps is None else (lambda i: int(steps[i]))
    if not is_time:
        evidence = {"throughput_before": 1 / evidence["median_before"],
                    "throughput_after": 1 / evidence["median_after"], **evidence}
    not_material = evidence["lost_share"] < MATERIAL_SHARE
    args = {
        "ratio": ratio,
        "lost_seconds_text": Phrase("throughput.lost_seconds") if "lost_seconds" in evidence else NOTHING,
        "slow_seconds_text": Phrase("throughput.slow_seconds") if "slow_seconds" in evidence else NOTHING,
        "why": NOTHING if severity != "info" else Phrase(
            "throughput.not_material" if not_material else "throughput.not_sustained"),
        "material_share": MATERIAL_SHARE,
    }
    return Event(
        kind="throughput",
        severity=severity,
        step=at(index),
        end_step=at(last),
        tag=tag,
        message="throughput.regression.time" if is_time else "throughput.regression.samples",
        evidence=dict(evidence, what="regression"),
        args=args,
        advice=None if severity == "info" else "throughput.advice.slowdown",
    )


def _change_point(logs: np.ndarray, min_points: int) -> tuple[int, float, float, float, bool] | None:
    """(onset, log median before, log median after, p-value, False) of the best single split."""
    pooled, block = _pool(logs)
    min_pooled = max(2, int(np.ceil(min_points / block)))
    best_k, best_cost = None, np.inf
    for k in range(min_pooled, pooled.size - min_pooled + 1):
        left, right = pooled[:k], pooled[k:]
        cost = np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum()
        if cost < best_cost:
            best_k, best_cost = k, cost
    if best_k is None:
        return None
    split = best_k * block
    before, after = logs[:split], logs[split:]
    if np.exp(np.median(after) - np.median(before)) < SLOWDOWN_WARNING:
        return None
    p_value = mann_whitney_p(after, before, "greater")
    if p_value >= P_VALUE:
        return None
    # the onset: the first point of the slow segment's neighbourhood that is already slow
    threshold = np.median(before) + np.log(SLOWDOWN_WARNING)
    onset = split
    while onset - 1 >= 0 and logs[onset - 1] >= threshold and split - onset < block:
        onset -= 1
    return onset, float(np.median(before)), float(np.median(after)), p_value, False


def _gradual_change(logs: np.ndarray, min_points: int) -> tuple[int, float, float, float, bool] | None:
    """A slow drift: the last `min_points` against the first ones (no single change point)."""
    first, last = logs[:min_points], logs[-min_points:]
    if np.exp(np.median(last) - np.median(first)) < SLOWDOWN_WARNING:
        return None
    p_value = mann_whitney_p(last, first, "greater")
    if p_value >= P_VALUE:
        return None
    level = rolling_median(logs, median_window(logs.size), edges="mirror")
    onset = int(np.argmax(level >= np.median(first) + np.log(SLOWDOWN_WARNING)))
    return onset, float(np.median(first)), float(np.median(last)), p_value, True


def _step_gaps(n: int, steps: np.ndarray | None) -> np.ndarray:
    """Steps each point stands for: the distance to the previous logged step (the first point
    gets the typical distance)."""
    if steps is None or len(steps) != n or n < 2:
        return np.ones(n)
    gaps = np.diff(np.asarray(steps, dtype=np.float64))
    typical = float(np.median(gaps[gaps > 0])) if np.any(gaps > 0) else 1.0
    return np.concatenate(([typical], np.where(gaps > 0, gaps, typical)))


def _cost(values, gaps, all_valid, valid, logs, onset, baseline) -> dict[str, float]:
    """Time the slow segment lost beyond the baseline, as a share of the run (same units)."""
    level = np.exp(rolling_median(logs, median_window(logs.size), edges="mirror"))
    slow = valid[onset:]
    excess = np.maximum(level[onset:] - np.exp(baseline), 0.0)
    lost_units = float(np.sum(excess * gaps[slow]))
    run_units = float(np.sum(values[all_valid] * gaps[all_valid]))
    slow_units = float(np.sum(values[slow] * gaps[slow]))
    return {
        "lost_units": lost_units,
        "lost_share": lost_units / run_units if run_units > 0 else 0.0,
        "slow_share": slow_units / run_units if run_units > 0 else 0.0,
    }


def _slow_seconds(values, gaps, valid, onset, wall_time, seconds_per_unit) -> float | None:
    """Wall-clock seconds the slow segment lasted, or None when nothing gives seconds."""
    slow = valid[onset:]
    if seconds_per_unit is not None:
        return float(np.sum(values[slow] * gaps[slow]) * seconds_per_unit)
    if wall_time is None or len(wall_time) != values.size:
        return None
    wall = np.asarray(wall_time, dtype=np.float64)
    start = wall[valid[onset - 1]] if onset > 0 else wall[valid[0]]
    span = float(wall[slow[-1]] - start)
    if not np.isfinite(span) or span <= 0 or np.any(np.diff(wall[valid]) < 0):
        return None  # absent (zeros) or inconsistent wall times
    return span


def _pool(logs: np.ndarray) -> tuple[np.ndarray, int]:
    block = int(np.ceil(logs.size / MAX_POINTS))
    if block <= 1:
        return logs, 1
    usable = logs[: (logs.size // block) * block]
    return np.median(usable.reshape(-1, block), axis=1), block


def rank_time_outliers(
    medians: dict[str, float],
    step_time: float | None = None,
    measure: str = "step_time",
    series: dict[str, tuple[np.ndarray, str]] | None = None,
) -> dict[str, Event]:
    """Ranks whose median time lags the others' (see module doc): rank -> its `throughput` event.

    `medians`: each rank's median time per step of one `measure` (`host_time`, `step_time`,
    `wall_time`...). `step_time`: the job's time per step in the same unit when the measure is
    only a part of the step (host time); None when the measure is the step time itself.
    `series`: each rank's (logged steps, tag) of that measure, to place its event from the end of
    warm-up to its last step (without it, at step 0).
    """
    names = [r for r, v in medians.items() if np.isfinite(v) and v >= 0]
    out: dict[str, Event] = {}
    if len(names) < 2:
        return out
    for rank in names:
        others = np.array([medians[r] for r in names if r != rank])
        centre = float(np.median(others))
        excess = medians[rank] - centre
        reference = step_time if step_time is not None else medians[rank]
        if excess <= 0 or not reference or reference <= 0:
            continue
        ratio = medians[rank] / centre if centre > 0 else float("inf")
        share = excess / reference
        if ratio < RANK_SLOWDOWN or share < MATERIAL_SHARE:
            continue
        if others.size >= 2:
            scale = step_time if step_time is not None else centre
            mad = max(float(np.median(np.abs(others - centre))), MAD_FLOOR_SHARE * scale)
            if excess / mad < RANK_MADS:
                continue
        steps, tag = (series or {}).get(rank, (np.zeros(1, dtype=np.int64), ""))
        host = measure == "host_time"
        out[rank] = Event(
            kind="throughput",
            severity="warning",
            step=int(steps[min(warmup_points(len(steps)), len(steps) - 1)]),
            end_step=int(steps[-1]),
            tag=tag,
            message="throughput.slow_rank.host_time" if host else "throughput.slow_rank",
            evidence={"median": medians[rank], "others_median": centre, "slowdown": ratio, "lost_share": share,
                      "what": "slow_rank", "measure": measure, "job_step_time_ms": step_time,
                      "ranks": len(medians)},
            args={"measure_label": Phrase(f"throughput.measure.{measure}")},
            advice="throughput.advice.host_time" if host else "throughput.advice.slow_rank",
        )
    return out


def rank_loss_departures(
    steps: np.ndarray, losses: dict[str, np.ndarray], tags: dict[str, str] | None = None
) -> dict[str, Event]:
    """Ranks whose loss departs from the job's (see module doc): rank -> its `throughput` event,
    from the step where the departure starts.

    `losses` are aligned on `steps` (NaN where a rank did not log that step); `tags`: each rank's
    loss tag.
    """
    ranks = [
        r
        for r, v in losses.items()
        if np.nanstd(np.where(np.isfinite(v), v, np.nan)) > 0 or not np.all(np.isfinite(v))
    ]
    if len(ranks) < 3 or steps.size < 3:
        return {}
    matrix = np.vstack([losses[r] for r in ranks])
    finite = np.where(np.isfinite(matrix), matrix, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.nanmedian(finite, axis=0)
        deviation = np.abs(matrix - centre) / np.abs(centre)
    deviation[~np.isfinite(matrix)] = np.inf  # a non-finite loss on one rank departs fully
    deviation[:, ~np.isfinite(centre)] = np.nan
    typical = float(np.nanmedian(np.where(np.isfinite(deviation), deviation, np.nan)))
    limit = max(RANK_LOSS_DEVIATION, RANK_LOSS_SPREADS * (typical if np.isfinite(typical) else 0.0))
    n = steps.size
    out = {}
    for row, rank in enumerate(ranks):
        level = rolling_median(deviation[row], median_window(n), edges="mirror")
        run = first_sustained_run(level >= limit, sustained_length(n, share=0.1))
        if run is None:
            continue
        start = run[0]
        while start - 1 >= 0 and deviation[row, start - 1] >= limit:
            start -= 1
        window = deviation[row, start : run[1]]
        out[rank] = Event(
            kind="throughput",
            severity="warning",
            step=int(steps[start]),
            end_step=int(steps[-1]),
            tag=(tags or {}).get(rank, ""),
            message="throughput.rank_loss",
            evidence={"median_relative_deviation": float(np.median(window)), "threshold": limit,
                      "typical_rank_deviation": typical, "what": "rank_loss", "ranks": len(losses)},
            advice="throughput.advice.rank_loss",
        )
    return out
