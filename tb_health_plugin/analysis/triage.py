"""Triage: a job's ranks trusted from their own online verdict, the others analysed in full.

The training job is the distributed engine: every rank's hooks analyse that rank while it trains
(`trainer_hooks/online.py`), write what they find as `health/findings` text and, after every
analysis, the verdict and the last step it covered as `health/online_verdict`
(`contract.ONLINE_VERDICT`). On a logdir of thousands of ranks the service need not repeat that
work: a rank whose online analysis covered its whole log and found nothing is trusted, and only
the others are analysed in full.

A rank is analysed in full (its own checks run) when any of these holds, the reason kept:
- it is rank 0, or not a rank at all (a run outside a job): the reference every job keeps;
- it has no online verdict (online analysis off, an older hook, another writer);
- its online verdict is stale: older than the rank's last logged step (the rank is still
  training, or its analysis failed and stopped);
- it reported something: any `health/findings` text, or a verdict other than healthy (a
  finding below the hooks' `findings_min_severity` is not written, the verdict still shows it);
- it logged histograms, which the online analysis does not see (it keeps scalars only).

Every rank, trusted or not, still joins its job's cross-rank checks (a slow rank, a rank whose
loss departs): no rank can see those alone. What triage can miss is a finding the offline
analysis would make on a trusted rank's own data that the online one did not make (the online
analysis thins a long run's older half, `online.MAX_POINTS_PER_TAG`); each report says which
way its rank was analysed, so the tab can say it.

Reading less: on a logdir triaged, ranks other than rank 0 are first read heads-only
(`readers.logdir_reader.HeadsOnly`, built by `service.heads_only_policy` from `reads_heads_only` and `points_kept`): every scalar tag keeps its first and
last points (the step range, the last logged step), and only the tags the decision and the
cross-rank checks read keep every point (`points_kept`: the online verdict and whatever may play
`CROSS_RANK_ROLES`; text and histograms are kept whole). `needing_points` then names the runs of a
unit to read again in full before the analysis: those analysed in full, and all of them when the
unit's cross-rank checks would read a series a heads-only rank did not keep. So a trusted rank
costs its job only its loss and step-time points, and every report is the one a full read gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import FINDINGS, ONLINE_VERDICT, SCALAR_SPELLINGS, STATUSES, job_of, rank_of
from tb_health_plugin.roles import resolve_roles
from tb_health_plugin.run_data import RunData, ScalarHeads

ENV_MODE = "TB_HEALTH_TRIAGE"  # "auto" (default), "on" or "off"
MODES = ("auto", "on", "off")
# In "auto", triage starts at this many runs. A full analysis costs about 25 ms of CPU per
# hook-written run (bench/bench_scale.py), so a logdir below this is analysed in full within a
# minute on one core, and its users get the offline analysis of every rank; above it the full
# analysis takes minutes and triage is what keeps the first verdicts coming.
AUTO_MIN_RUNS = 1000

FULL, ONLINE = "full", "online"  # how a rank was analysed (the report's `analysis` field)
REASONS = ("rank_0", "not_a_rank", "no_online_verdict", "stale_online_verdict", "reported", "histograms")
# The scalar roles whose points the cross-rank checks read (`checks/throughput.py`: each rank's
# loss, and its host time, step time or throughput); a heads-only rank keeps them whole.
CROSS_RANK_ROLES = ("loss", "host_time_ms", "step_time_ms", "step_time_s", "throughput")


def mode_from_environment(environ: dict[str, str] | None = None) -> str:
    mode = (environ if environ is not None else os.environ).get(ENV_MODE, "auto").strip().lower()
    return mode if mode in MODES else "auto"


def enabled(mode: str, run_count: int) -> bool:
    return mode == "on" or (mode == "auto" and run_count >= AUTO_MIN_RUNS)


def online_verdict(run: RunData) -> tuple[int, str] | None:
    """(last step the online analysis covered, its verdict), or None when the run has none."""
    series = run.scalars.get(ONLINE_VERDICT)
    if series is None or not len(series):
        return None
    code = series.values[-1]
    status = STATUSES[int(code)] if code == code and 0 <= code < len(STATUSES) and code == int(code) else "unknown"
    return int(series.steps[-1]), status


def _last_logged_step(run: RunData) -> int | None:
    lasts = [int(s.steps[-1]) for tag, s in run.scalars.items() if tag != ONLINE_VERDICT and len(s)]
    lasts += [int(h.steps[-1]) for h in run.histograms.values() if len(h)]
    return max(lasts, default=None)


def full_analysis_reason(run: RunData) -> str | None:
    """Why this run must be analysed in full (one of `REASONS`), or None when its online verdict
    can be trusted (see the module doc)."""
    rank = rank_of(run.name)
    if rank is None:
        return "not_a_rank"
    if rank == 0:
        return "rank_0"
    verdict = online_verdict(run)
    if verdict is None:
        return "no_online_verdict"
    covered, status = verdict
    last = _last_logged_step(run)
    if last is not None and covered < last:
        return "stale_online_verdict"
    findings = run.texts.get(FINDINGS)
    if status != "healthy" or (findings is not None and len(findings)):
        return "reported"
    if any(len(h) for h in run.histograms.values()):
        return "histograms"
    return None


def points_kept(overrides: dict[str, str] | None = None) -> frozenset[str]:
    """The scalar tags a rank read heads-only keeps whole: its online verdict and every spelling
    of `CROSS_RANK_ROLES`, or the tags `overrides` name for them. (The reader asks once per tag
    of every run: built once per set of overrides.)"""
    return _points_kept(frozenset((role, tag) for role, tag in (overrides or {}).items() if role in CROSS_RANK_ROLES))


@cache
def _points_kept(overridden: frozenset[tuple[str, str]]) -> frozenset[str]:
    tags = {ONLINE_VERDICT, *(tag for role in CROSS_RANK_ROLES for tag in SCALAR_SPELLINGS[role])}
    tags.update(tag for _, tag in overridden)
    return frozenset(tags)


def reads_heads_only(mode: str, name: str, runs_found: int) -> bool:
    """Whether run `name` of a logdir of `runs_found` runs is read heads-only first under triage
    `mode`: every rank but rank 0 of a logdir triaged."""
    return enabled(mode, runs_found) and rank_of(name) not in (None, 0)


def is_heads_only(run: RunData) -> bool:
    return any(isinstance(series, ScalarHeads) for series in run.scalars.values())


def needing_points(runs: list[RunData], overrides: dict[str, str] | None, triage: bool) -> list[str]:
    """The runs of a unit read heads-only that must be read in full before `analyze_unit`: all of
    them without `triage`; with it, those analysed in full (`full_analysis_reason`), or all of
    them when the cross-rank checks would read what a heads-only rank did not keep."""
    heads = [run for run in runs if is_heads_only(run)]
    if not heads or not triage or not _cross_rank_inputs_kept(runs, overrides):
        return [run.name for run in heads]
    return [run.name for run in heads if full_analysis_reason(run) is not None]


def _cross_rank_inputs_kept(runs: list[RunData], overrides: dict[str, str] | None) -> bool:
    """Whether the unit's cross-rank checks read only points its heads-only ranks kept.

    They read each rank's loss and one time measure (`checks/throughput.py`): the host time when
    every rank has it (then also each rank's step time or throughput, or without one, the wall
    times of its loss or of any scalar), else the step time or time per sample when every rank
    has the same one, else the wall times between logged points. The roles' tags must be kept,
    and the wall-time fallback, which may read any tag, must not concern a heads-only rank."""
    ranks = [run for run in runs if job_of(run.name) is not None]
    if len(ranks) < 2:
        return True  # no cross-rank check runs
    timing, has_host = {}, {}
    for run in ranks:
        roles = resolve_roles(run.scalars.keys(), run.histograms.keys(), overrides).scalars
        heads = is_heads_only(run)
        if heads and any(role in roles and isinstance(run.scalars[roles[role]], ScalarHeads) for role in CROSS_RANK_ROLES):
            return False
        present = {role for role in CROSS_RANK_ROLES if role in roles and len(run.scalars[roles[role]])}
        timing[run.name] = ("step" if present & {"step_time_ms", "step_time_s"}
                            else "samples" if "throughput" in present else None)
        has_host[run.name] = "host_time_ms" in present
    heads_timed = all(timing[run.name] is not None for run in ranks if is_heads_only(run))
    if all(has_host.values()):
        return heads_timed
    return heads_timed and len(set(timing.values())) == 1


def analyze_unit(
    runs: list[RunData], overrides: dict[str, str] | None = None, lang: str | None = None, triage: bool = True,
    run_findings: Callable[[RunSignals], list[Event]] | None = None,
) -> list[dict[str, Any]]:
    """`engine.analyze_runs` of one unit (a job's ranks, or one run). With `triage`, each report
    says how its rank was analysed: `analysis` is `full` (with `analysis_reason`) or `online`
    (trusted from its online verdict); without, the reports are the engine's, unchanged.
    `run_findings` is passed on to the engine (a memo of each run's own findings)."""
    if not triage:
        return engine.analyze_runs(runs, overrides, lang=lang, run_findings=run_findings)
    reasons = {run.name: full_analysis_reason(run) for run in runs}
    full = {name for name, reason in reasons.items() if reason is not None}
    reports = engine.analyze_runs(runs, overrides, lang=lang, own_checks=full, run_findings=run_findings)
    for run, report in zip(runs, reports, strict=True):
        if run.name in full:
            report["analysis"], report["analysis_reason"] = FULL, reasons[run.name]
        else:
            report["analysis"] = ONLINE
    return reports
