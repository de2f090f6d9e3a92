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
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import FINDINGS, ONLINE_VERDICT, STATUSES, rank_of
from tb_health_plugin.run_data import RunData

ENV_MODE = "TB_HEALTH_TRIAGE"  # "auto" (default), "on" or "off"
MODES = ("auto", "on", "off")
# In "auto", triage starts at this many runs. A full analysis costs about 25 ms of CPU per
# hook-written run (bench/bench_scale.py), so a logdir below this is analysed in full within a
# minute on one core, and its users get the offline analysis of every rank; above it the full
# analysis takes minutes and triage is what keeps the first verdicts coming.
AUTO_MIN_RUNS = 1000

FULL, ONLINE = "full", "online"  # how a rank was analysed (the report's `analysis` field)
REASONS = ("rank_0", "not_a_rank", "no_online_verdict", "stale_online_verdict", "reported", "histograms")


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
