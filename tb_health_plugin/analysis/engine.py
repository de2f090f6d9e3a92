"""Runs every check over a run (and every cross-rank check over a job) into the report.

A check is `Callable[[RunSignals], list[Event]]`, a thin adapter that picks arrays out of the
signals and calls pure detectors (`analysis/detectors/`); the checks are those of the kinds in
the registry (`analysis/kinds/`). Job checks take the signals of all ranks of one job (runs
named `.../rank_<id>`). A failing check must not hide the others: its exception becomes an
`info` finding saying the check could not run. The report is written in one language by the
message catalogue (`tb_health_plugin/i18n`), or left as events (`lang=None`) for a caller that
renders it per request.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Any

from tb_health_plugin.analysis import diagnosis, same_event
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.findings import run_report
from tb_health_plugin.analysis.kinds import diagnosers, job_checks, registry, run_checks
from tb_health_plugin.analysis.render import note_event, render_run_report
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import REPORT_VERSION, job_of
from tb_health_plugin.run_data import RunData

logger = logging.getLogger(__name__)

registry()  # import every kind's module (and its detectors) now, not during the first analysis


def _safely(check, argument, run: str) -> Any:
    try:
        return check(argument)
    except Exception as error:  # a broken check must not hide the other findings
        logger.exception("check %s failed on %s", getattr(check, "__name__", check), run)
        return error


def findings_for_run(signals: RunSignals) -> list[Event]:
    findings: list[Event] = []
    for check in run_checks():
        result = _safely(check, signals, signals.run)
        if isinstance(result, Exception):
            findings.append(_check_failed(check, result))
        else:
            findings.extend(result)
    return same_event.said_once(findings)


def analyze_runs(
    runs: list[RunData],
    overrides: dict[str, str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    lang: str | None = "en",
    run_findings: Callable[[RunSignals], list[Event]] | None = None,
    own_checks: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """The contract's `runs` list for these runs, cross-rank checks included.

    `own_checks`: the runs whose own checks run (default all); the others join the cross-rank
    checks only (`analysis/triage.py`: ranks trusted from their online verdict).

    `overrides` maps a scalar role to a tag (see `roles.resolve_roles`); `on_progress(done,
    total)` is called after each run's own checks. The findings are written in `lang`, or left
    as `Event`s when it is None (`analysis.render.render_run_report` writes them later).
    `run_findings(signals)` stands for `findings_for_run` (each run's own checks), e.g. to reuse
    them per data version (`analysis/run_findings.py`).
    """
    signals = {run.name: RunSignals.from_run(run, overrides) for run in runs}
    findings = {}
    for index, (name, run_signals) in enumerate(signals.items(), start=1):
        own = run_findings or findings_for_run
        findings[name] = own(run_signals) if own_checks is None or name in own_checks else []
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
    causes = diagnosers()
    for run in runs:
        findings[run.name].extend(note_event(note) for note in run.notes)  # what the readers did about the data
        diagnosed = diagnosis.explain(findings[run.name], signals[run.name], causes)
        report = run_report(run.name, diagnosed, run.step_range())
        reports.append(report if lang is None else render_run_report(report, lang))
    return reports


def analyze_run(run: RunData, overrides: dict[str, str] | None = None, lang: str | None = "en") -> dict[str, Any]:
    return analyze_runs([run], overrides, lang=lang)[0]


def logdir_report(logdir: str, run_reports: list[dict[str, Any]], lang: str = "en") -> dict[str, Any]:
    """The CLI's report: rendered run reports, with the language they are written in."""
    return {"version": REPORT_VERSION, "logdir": logdir, "language": lang, "runs": run_reports}


def _check_failed(check, error: Exception) -> Event:
    name = getattr(check, "__name__", str(check))
    return Event(
        kind="check_error",
        severity="info",
        step=0,
        tag="",
        message="check_error.failed",
        args={"check": name, "error_type": type(error).__name__, "error": str(error)},
    )
