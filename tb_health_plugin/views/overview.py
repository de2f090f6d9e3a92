"""The overview's rows: one summary per run and one roll-up per job (the ranks of one training).

Computed once on the server (and cached by the service per data version) so the tab, the
routes and any other client read the same verdicts; the tab only sorts and filters them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tb_health_plugin.contract import SEVERITY_RANK

PENDING = "pending"  # a run whose first analysis has not finished yet
# A job's status is its members' worst, in this order (a pending rank outranks one without data:
# its verdict is coming; any verdict outranks both).
JOB_STATUS_ORDER = ("no_data", PENDING, "healthy", "warning", "critical")
_JOB_STATUS_RANK = {status: rank for rank, status in enumerate(JOB_STATUS_ORDER)}
WORST_FIELDS = ("kind", "severity", "step", "message")
TRIAGE_FIELDS = ("analysis", "analysis_reason")  # how a run was analysed (`analysis/triage.py`)


def pending_report(run: str) -> dict[str, Any]:
    return {"run": run, "status": PENDING, "steps": None, "findings": []}


def _worst(findings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most severe warning or critical finding, the earliest of equals (info is context)."""
    alarms = [f for f in findings if f["severity"] != "info"]
    worst = max(alarms, key=lambda f: (SEVERITY_RANK[f["severity"]], -f["step"]), default=None)
    return {k: worst[k] for k in WORST_FIELDS} if worst else None


def run_summary(report: dict[str, Any], signals: dict[str, str], last_update: float | None) -> dict[str, Any]:
    """One run's row from its report, the tags playing each role and its newest wall time."""
    findings = report["findings"]
    counts = {severity: 0 for severity in SEVERITY_RANK}
    for finding in findings:
        counts[finding["severity"]] += 1
    triage = {key: report[key] for key in TRIAGE_FIELDS if key in report}  # present under triage only
    return {
        **triage,
        "run": report["run"],
        "status": report["status"],
        "counts": counts,
        "worst": _worst(findings),
        "kinds": sorted({f["kind"] for f in findings}),
        "steps": report["steps"],
        "last_update": last_update,
        "signals": signals,
    }


def job_summary(job: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """A job's row: its ranks' worst status and finding, summed counts, the union of their kinds
    and steps, the newest update."""
    counts = {severity: sum(m["counts"][severity] for m in members) for severity in SEVERITY_RANK}
    worsts = [m["worst"] for m in members if m["worst"]]
    spans = [m["steps"] for m in members if m["steps"]]
    updates = [m["last_update"] for m in members if m["last_update"] is not None]
    triage = {}
    if any("analysis" in m for m in members):  # which ranks' verdicts rest on a full analysis
        triage["triage"] = {
            way: sorted(m["run"] for m in members if m.get("analysis") == way) for way in ("full", "online")
        }
    return {
        **triage,
        "run": job,
        "job": job,
        "ranks": sorted(m["run"] for m in members),
        "status": max((m["status"] for m in members), key=lambda s: _JOB_STATUS_RANK.get(s, 0)),
        "counts": counts,
        "worst": max(worsts, key=lambda w: (SEVERITY_RANK[w["severity"]], -w["step"]), default=None),
        "kinds": sorted({kind for m in members for kind in m["kinds"]}),
        "steps": {"first": min(s["first"] for s in spans), "last": max(s["last"] for s in spans)} if spans else None,
        "last_update": max(updates, default=None),
        "signals": {},
    }


def job_summaries(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The roll-up of every job of two ranks or more (a job of one rank is just its run)."""
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run.get("job") is not None:
            by_job[run["job"]].append(run)
    return [job_summary(job, members) for job, members in sorted(by_job.items()) if len(members) >= 2]
