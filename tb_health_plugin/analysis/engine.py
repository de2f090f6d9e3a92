"""Runs every check over a run (and every cross-rank check over a job) into the report.

A check is `Callable[[RunSignals], list[Finding]]`, a thin adapter that picks arrays out of the
signals and calls pure detectors (`analysis/detectors/`). Job checks take the signals of all
ranks of one job (runs named `.../rank_<id>`). A failing check must not hide the others: its
exception becomes an `info` finding saying the check could not run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks import gradients, loss, loss_scale, lr_schedule, throughput, weights
from tb_health_plugin.analysis.findings import Finding, run_report
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import REPORT_VERSION, job_of
from tb_health_plugin.run_data import RunData

logger = logging.getLogger(__name__)

RunCheck = Callable[[RunSignals], list[Finding]]
JobCheck = Callable[[dict[str, RunSignals]], dict[str, list[Finding]]]

CHECK_MODULES = (loss, gradients, weights, lr_schedule, loss_scale, throughput)


def run_checks() -> list[RunCheck]:
    return [check for module in CHECK_MODULES for check in getattr(module, "RUN_CHECKS", [])]


def job_checks() -> list[JobCheck]:
    return [check for module in CHECK_MODULES for check in getattr(module, "JOB_CHECKS", [])]


def _safely(check, argument, run: str) -> Any:
    try:
        return check(argument)
    except Exception as error:  # a broken check must not hide the other findings
        logger.exception("check %s failed on %s", getattr(check, "__name__", check), run)
        return error


def findings_for_run(signals: RunSignals) -> list[Finding]:
    findings: list[Finding] = []
    for check in run_checks():
        result = _safely(check, signals, signals.run)
        if isinstance(result, Exception):
            findings.append(_check_failed(check, result))
        else:
            findings.extend(result)
    return findings


def analyze_runs(
    runs: list[RunData],
    overrides: dict[str, str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """The contract's `runs` list for these runs, cross-rank checks included.

    `overrides` maps a scalar role to a tag (see `roles.resolve_roles`); `on_progress(done,
    total)` is called after each run's own checks.
    """
    signals = {run.name: RunSignals.from_run(run, overrides) for run in runs}
    findings = {}
    for index, (name, run_signals) in enumerate(signals.items(), start=1):
        findings[name] = findings_for_run(run_signals)
        if on_progress is not None:
            on_progress(index, len(signals))
    jobs: dict[str, dict[str, RunSignals]] = defaultdict(dict)
    for name, s in signals.items():
        job = job_of(name)
        if job is not None:
            jobs[job][name] = s
    for job, members in jobs.items():
        if len(members) < 2:
            continue
        for check in job_checks():
            result = _safely(check, members, job)
            if isinstance(result, Exception):
                continue
            for name, extra in result.items():
                findings[name].extend(extra)
    reports = []
    for run in runs:
        findings[run.name].extend(Finding(kind=note.kind, severity="info", step=0, tag="", message=note.message)
                                  for note in run.notes)  # what the readers did about the data
        diagnosed = diagnosis.explain(findings[run.name], signals[run.name])
        reports.append(run_report(run.name, diagnosed, run.step_range()))
    return reports


def analyze_run(run: RunData, overrides: dict[str, str] | None = None) -> dict[str, Any]:
    return analyze_runs([run], overrides)[0]


def logdir_report(logdir: str, run_reports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": REPORT_VERSION, "logdir": logdir, "runs": run_reports}


def _check_failed(check, error: Exception) -> Finding:
    name = getattr(check, "__name__", str(check))
    return Finding(
        kind="check_error",
        severity="info",
        step=0,
        tag="",
        message=f"The check {name} could not run on this run ({type(error).__name__}: {error}).",
    )
