"""What a health report holds, gathered once and rendered as HTML or Markdown.

A report is meant to outlive the logdir (an audit trail, a message to a colleague), so beside
each run's verdict and findings it keeps what the verdict rests on: a chart of each finding's
series around its step, the run's configuration as it was logged (its text tags other than our
own `health/*` ones), and what was read: every file with its byte count, records skipped as
damaged and the reader's notes.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tb_health_plugin import __version__
from tb_health_plugin.analysis.render import note_text
from tb_health_plugin.contract import FINDINGS, NOTES, SEVERITY_RANK, STATUSES
from tb_health_plugin.report.charts import ChartTask, chart_task, draw_here

CONFIG_TEXT_LIMIT = 4000  # characters of one logged configuration text kept in the report
OWN_TEXT_TAGS = (FINDINGS, NOTES)


@dataclass
class FindingEntry:
    finding: dict[str, Any]
    chart_svg: str | None  # None when the run has no points of the finding's tag


@dataclass
class RunEntry:
    name: str
    status: str
    steps: dict[str, int] | None
    findings: list[FindingEntry]
    config: dict[str, str]  # text tag -> its latest value
    files: list[tuple[str, int]]  # (path relative to the logdir, bytes read)
    skipped_records: int
    notes: list[str]


@dataclass
class HealthReport:
    logdir: str
    generated: str
    version: str
    lang: str
    runs: list[RunEntry] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {status: sum(run.status == status for run in self.runs) for status in STATUSES}


def build_report(logdir: str, reader, report: dict[str, Any], lang: str = "en",
                 runs: list[str] | None = None, snapshots: dict[str, Any] | None = None,
                 draw: Callable[[list[ChartTask]], list[str]] | None = None) -> HealthReport:
    """The report of `runs` (all when None) from a refreshed `LogdirReader` and its analysis.

    `snapshots`: the runs' data the analysis was made from (name -> `RunData`), so the charts
    show the same points; taken from the reader when not given. `draw(tasks)`: the SVG of each
    chart, in order (drawing is most of a report's time: `tb-health report --jobs` draws in
    worker processes); one after the other here when not given."""
    document = HealthReport(
        logdir=logdir, version=__version__, lang=lang,
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    by_name = {run["run"]: run for run in report["runs"]}
    wanted = runs if runs is not None else [run["run"] for run in report["runs"]]
    charts: list[tuple[FindingEntry, ChartTask]] = []
    for name in wanted:
        analysed = by_name.get(name)
        if analysed is None:
            continue
        data = snapshots[name] if snapshots is not None and name in snapshots else reader.run(name)
        entries = [FindingEntry(f, None) for f in _ordered(analysed["findings"])]
        charts.extend((entry, task) for entry in entries if (task := _chart_task(data, entry.finding)) is not None)
        document.runs.append(RunEntry(
            name=name, status=analysed["status"], steps=analysed.get("steps"), findings=entries,
            config=_config(data), files=_files(logdir, reader.files_read(name)),
            skipped_records=int(data.skipped_records), notes=[note_text(note, lang) for note in data.notes],
        ))
    drawn = (draw or draw_here)([task for _, task in charts])
    for (entry, _), svg in zip(charts, drawn, strict=True):
        entry.chart_svg = svg
    document.runs.sort(key=lambda run: (-_status_rank(run.status), run.name))
    return document


def _status_rank(status: str) -> int:
    return {"critical": 3, "warning": 2, "healthy": 1}.get(status, 0)


def _ordered(findings: list[dict]) -> list[dict]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f["severity"]], f["step"]))


def _chart_task(data, finding: dict) -> ChartTask | None:
    series = data.scalars.get(finding.get("tag", ""))
    if series is None or len(series) < 2:
        return None
    start = int(finding["step"])
    end = int(finding.get("end_step") or start)
    return chart_task(series.steps, series.values, finding["tag"], start, end)


def _config(data) -> dict[str, str]:
    config = {}
    for tag, texts in sorted(data.texts.items()):
        if tag in OWN_TEXT_TAGS or not len(texts):
            continue
        value = texts.values[-1]
        config[tag] = value if len(value) <= CONFIG_TEXT_LIMIT else value[:CONFIG_TEXT_LIMIT] + " ..."
    return config


def _files(logdir: str, files: list[tuple[str, int]]) -> list[tuple[str, int]]:
    out = []
    for path, size in files:
        try:
            shown = os.path.relpath(path, logdir)
        except ValueError:
            shown = path
        out.append((shown, size))
    return out
