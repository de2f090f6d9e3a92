"""From findings to the messages a person reads on a phone: which findings are new, for which job.

A report's findings become `Alert`s (job, rank, kind, severity, step, one sentence, a link to
the run in the Health tab). `JobDeduplicator` lets one message through per finding per job:
every rank of a job usually sees the same event (a divergence, a NaN) at nearly the same step,
and a finding's onset can move by a few logging intervals as more data arrives, so two alerts of
one job, kind and tag are one event when their steps lie within `SAME_EVENT_SHARE` of the run's
length of each other. 2% is about ten logging intervals of a 500-collection run, wider than the
onset estimates of one event on different ranks differ; two distinct events that close (two
spikes ten windows apart) are then reported as one, which costs a person nothing they would
not see on opening the run. Ranks that saw the same event are named in the one message.

`compose` writes one message per alert, or one summary per job when many arrive at once.
"""

from __future__ import annotations

import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from tb_health_plugin.contract import SEVERITY_RANK, job_of, rank_of
from tb_health_plugin.i18n.catalogue import LANGUAGES, template
from tb_health_plugin.notify.formats import Message

SAME_EVENT_SHARE = 0.02
SUMMARY_AT = 3  # this many alerts of one job at once become one summary message
SUMMARY_LINES = 8  # alerts listed in a summary before "and N more"

LABELS = ("job", "rank", "ranks", "step", "run", "summary", "more", "open")


def labels(lang: str) -> dict:
    """The alerts' own words in `lang` (templates where they take figures), from the catalogue (`alert.*`)."""
    lang = lang if lang in LANGUAGES else LANGUAGES[0]
    return {**{name: template(f"alert.{name}", lang) for name in LABELS},
            "severity": {severity: template(f"alert.severity.{severity}", lang) for severity in SEVERITY_RANK}}


@dataclass(frozen=True)
class Alert:
    job: str
    run: str
    rank: int | None
    kind: str
    severity: str
    step: int
    tag: str
    text: str
    last_step: int = 0  # the run's last logged step, for the same-event window
    link: str | None = None
    other_ranks: tuple[int, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "run": self.run, "rank": self.rank, "kind": self.kind,
            "severity": self.severity, "step": self.step, "tag": self.tag, "text": self.text,
            "link": self.link, "other_ranks": list(self.other_ranks),
        }


def health_tab_link(tensorboard_url: str | None, run: str) -> str | None:
    """The Health tab opened on `run`: TensorBoard's dashboard hash plus the run to select."""
    if not tensorboard_url:
        return None
    return f"{tensorboard_url.rstrip('/')}/#health&run={urllib.parse.quote(run, safe='')}"


def alerts_from_report(report: dict[str, Any], tensorboard_url: str | None = None,
                       min_severity: str = "warning") -> list[Alert]:
    """The report's findings at or above `min_severity`, as alerts; a finding that is part of
    another one (`part_of` in its evidence) is left to that one."""
    floor = SEVERITY_RANK[min_severity]
    alerts = []
    for run in report.get("runs", []):
        name = run["run"]
        last = (run.get("steps") or {}).get("last") or 0
        job = job_of(name) or name
        for finding in run.get("findings", []):
            if SEVERITY_RANK.get(finding.get("severity"), 0) < floor:
                continue
            if (finding.get("evidence") or {}).get("part_of"):
                continue  # e.g. the NaN end of a divergence: the finding it belongs to speaks for it
            alerts.append(Alert(
                job=job, run=name, rank=rank_of(name), kind=finding["kind"],
                severity=finding["severity"], step=int(finding["step"]), tag=str(finding.get("tag", "")),
                text=str(finding.get("message", "")), last_step=int(last),
                link=health_tab_link(tensorboard_url, name),
            ))
    return alerts


class JobDeduplicator:
    """Remembers what was sent; `new(alerts)` returns the alerts that are news, one per event."""

    def __init__(self, sent: list[dict[str, Any]] | None = None) -> None:
        self._sent: dict[tuple[str, str, str], list[tuple[int, int]]] = defaultdict(list)
        for item in sent or []:
            self._sent[(item["job"], item["kind"], item["tag"])].append((int(item["step"]), int(item.get("last_step", 0))))

    def new(self, alerts: list[Alert]) -> list[Alert]:
        fresh: list[Alert] = []
        for alert in sorted(alerts, key=lambda a: (a.job, a.step, a.rank if a.rank is not None else -1)):
            key = (alert.job, alert.kind, alert.tag)
            merged = self._merge_into(fresh, alert)
            if merged or any(_same_event(alert, step, last) for step, last in self._sent[key]):
                continue
            fresh.append(alert)
            self._sent[key].append((alert.step, alert.last_step))
        return fresh

    @staticmethod
    def _merge_into(fresh: list[Alert], alert: Alert) -> bool:
        """Fold `alert` into an alert of this batch for the same event on another rank."""
        for index, other in enumerate(fresh):
            if (other.job, other.kind, other.tag) == (alert.job, alert.kind, alert.tag) and \
                    _same_event(alert, other.step, other.last_step):
                if alert.rank is not None and alert.rank != other.rank and alert.rank not in other.other_ranks:
                    worse = SEVERITY_RANK[alert.severity] > SEVERITY_RANK[other.severity]
                    fresh[index] = replace(other, other_ranks=(*other.other_ranks, alert.rank),
                                           severity=alert.severity if worse else other.severity)
                return True
        return False

    def state(self) -> list[dict[str, Any]]:
        return [{"job": job, "kind": kind, "tag": tag, "step": step, "last_step": last}
                for (job, kind, tag), steps in self._sent.items() for step, last in steps]


def _same_event(alert: Alert, step: int, last_step: int) -> bool:
    window = SAME_EVENT_SHARE * max(alert.last_step, last_step, 1)
    return abs(alert.step - step) <= window


def compose(alerts: list[Alert], lang: str = "en") -> list[Message]:
    """One message per alert, or per job a summary when `SUMMARY_AT` or more arrive at once."""
    words = labels(lang)
    by_job: dict[str, list[Alert]] = defaultdict(list)
    for alert in alerts:
        by_job[alert.job].append(alert)
    messages = []
    for job, group in by_job.items():
        group.sort(key=lambda a: (-SEVERITY_RANK[a.severity], a.step))
        if len(group) < SUMMARY_AT:
            messages.extend(_single(alert, words) for alert in group)
            continue
        shown = group[:SUMMARY_LINES]
        lines = [_summary_line(alert, words) for alert in shown]
        if len(group) > len(shown):
            lines.append(words["more"].format(n=len(group) - len(shown)))
        worst = words["severity"][group[0].severity]
        messages.append(Message(
            title=f"[{worst}] tb-health: " + words["summary"].format(n=len(group), job=_job_name(job, words)),
            lines=tuple(lines), link=group[0].link, link_text=words["open"],
            alerts=tuple(a.to_json() for a in group),
        ))
    return messages


def _job_name(job: str, labels: dict) -> str:
    return f"{labels['job']} {job}"


def _single(alert: Alert, labels: dict) -> Message:
    where = f"{labels['job']} {alert.job}"
    if alert.rank is not None:
        where += f", {labels['rank']} {alert.rank}"
    lines = [f"{labels['step']} {alert.step:,}: {alert.text}", f"{labels['run']}: {alert.run}"]
    if alert.other_ranks:
        lines.append(f"{labels['ranks']}: {', '.join(str(r) for r in sorted(alert.other_ranks))}")
    return Message(
        title=f"[{labels['severity'][alert.severity]}] {alert.kind} · {where}",
        lines=tuple(lines), link=alert.link, link_text=labels["open"], alerts=(alert.to_json(),),
    )


def _summary_line(alert: Alert, labels: dict) -> str:
    rank = f" {labels['rank']} {alert.rank}" if alert.rank is not None else ""
    return f"{labels['severity'][alert.severity]} {alert.kind}{rank}, {labels['step']} {alert.step:,}: {alert.text}"

