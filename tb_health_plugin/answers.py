"""What the data routes answer, computed from a run's data and roles.

Shared by the in-process data layer (`service.HealthService`) and the worker process
(`worker_process`), so a route answers the same wherever its data was read. The overview's rows
are rendered here too, once per run and report: a full re-analysis replaces the reports one unit
at a time, and re-rendering a thousand unchanged rows on every `runs` request would make the
route as slow as the number of runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tensorboard import errors

from tb_health_plugin.analysis.findings import json_safe
from tb_health_plugin.analysis.render import kind_labels, render_run_report
from tb_health_plugin.contract import job_of, x_axis_of
from tb_health_plugin.roles import RoleMap
from tb_health_plugin.run_data import RunData
from tb_health_plugin.views import envelope as envelope_view
from tb_health_plugin.views import heatmap as heatmap_view
from tb_health_plugin.views import overview as overview_view


def json_body(payload: Any) -> str:
    """Strict JSON; should a non-finite number hide anywhere (a wall time of `inf` in a log, an
    evidence value), it is sent as null instead of failing the whole response."""
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(json_safe(payload, nonfinite_as_null=True), allow_nan=False, separators=(",", ":"))


def tags_payload(run: str, data: RunData, roles: RoleMap) -> dict[str, Any]:
    """The `tags` route: every tag of the run and the role each plays."""
    return {
        "run": run,
        "scalars": sorted(data.scalars),
        "histograms": sorted(data.histograms),
        "signals": roles.scalars,
        "per_parameter": roles.per_parameter,
        "samples_axis": sorted(tag for tag in data.scalars if x_axis_of(tag) != "step"),
    }


def series_payload(run: str, tag: str, data: RunData, width: int, start: int | None, end: int | None) -> dict[str, Any]:
    """The `series` route: one scalar tag's envelope, `width` buckets over [start, end]."""
    if tag not in data.scalars:
        raise errors.NotFoundError(f"unknown tag for run {run}: {tag}")
    payload = {"run": run, "tag": tag, "x_axis": x_axis_of(tag)}
    payload.update(envelope_view.envelope(data.scalars[tag], width, start, end))
    return payload


def heatmap_body(run: str, data: RunData, roles: RoleMap, width: int, start: int | None, end: int | None) -> str:
    """The `heatmap` route's JSON body: per-parameter gradient norms over time."""
    per_param = {
        param: (tag, data.scalars[tag]) for param, tag in roles.per_parameter.get("param_grad_norm", {}).items()
    }
    payload = {"run": run}
    payload.update(heatmap_view.heatmap(per_param, width, start, end))
    return json_body(payload)


@dataclass(frozen=True)
class RunEntry:
    """What one overview row is made of: the run's last complete report (None before its first
    analysis), its signals, newest wall time and source format, and whether a newer version of
    its data is being analysed."""

    name: str
    report: dict[str, Any] | None
    signals: dict[str, str]
    last_update: float | None
    source: str | None
    analysing: bool = False


class OverviewRows:
    """The overview's rows, each rendered once per (language, report object, signals, update)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], tuple[RunEntry, dict[str, Any]]] = {}

    def overview(self, logdir: str, lang: str, entries: list[RunEntry], config: dict[str, Any]) -> dict[str, Any]:
        """The `runs` route's body (without its `storage` and status fields)."""
        runs = [self._row(entry, lang) for entry in entries]
        live = {(entry.name, lang) for entry in entries}
        for key in [key for key in self._rows if key[1] == lang and key not in live]:
            del self._rows[key]
        return {"logdir": logdir, "language": lang, "kinds": kind_labels(lang), "runs": runs,
                "jobs": overview_view.job_summaries(runs), "config": config}

    def _row(self, entry: RunEntry, lang: str) -> dict[str, Any]:
        cached = self._rows.get((entry.name, lang))
        if cached is not None and _same_row(cached[0], entry):
            return cached[1]
        report = render_run_report(entry.report, lang) if entry.report else overview_view.pending_report(entry.name)
        summary = overview_view.run_summary(report, entry.signals, entry.last_update)
        summary["job"] = job_of(entry.name)
        summary["source"] = entry.source
        summary["analysing"] = entry.analysing
        self._rows[(entry.name, lang)] = (entry, summary)  # the entry keeps its report alive
        return summary


def _same_row(old: RunEntry, new: RunEntry) -> bool:
    return (old.report is new.report and old.signals == new.signals and old.last_update == new.last_update
            and old.source == new.source and old.analysing == new.analysing)
