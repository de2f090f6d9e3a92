"""An event as the report's finding, written in one language.

The message is the event's template filled from its evidence, its arguments and its steps;
`Phrase` arguments (clauses chosen by the numbers) are rendered first. What to do (`advice`,
the kind's own, or else the likely cause's) and the likely cause (`evidence["cause"]`, set by
`analysis.diagnosis`) are appended with the catalogue's own joining templates, and also given
on their own in the evidence (`advice`, `cause_detail`, `cause_advice`) for the tab.
"""

from __future__ import annotations

from typing import Any

from tb_health_plugin.analysis.event import Clauses, Event, Phrase
from tb_health_plugin.analysis.findings import json_safe
from tb_health_plugin.i18n.catalogue import LANGUAGES, messages
from tb_health_plugin.i18n.catalogue import text as catalogue_text
from tb_health_plugin.run_data import ReadNote


def text(message_id: str, lang: str, **fields: Any) -> str:
    """One catalogue entry filled from `fields`; an empty id is an empty clause."""
    if not message_id:
        return ""
    return catalogue_text(message_id, lang, **fields)


def _fields(event: Event, lang: str) -> dict[str, Any]:
    plain = {**event.evidence, "step": event.step, "end_step": event.end_step, "tag": event.tag}
    plain.update((k, v) for k, v in event.args.items() if not isinstance(v, Phrase | Clauses))
    phrases = {k: text(v.id, lang, **plain) for k, v in event.args.items() if isinstance(v, Phrase)}
    lists = {k: text(f"{v.id}.separator", lang).join(text(v.id, lang, **item) for item in v.items)
             for k, v in event.args.items() if isinstance(v, Clauses)}
    return {**plain, **phrases, **lists}


def note_event(note: ReadNote) -> Event:
    """A reader's note as an `info` finding written from the catalogue's `note.<kind>`; a note
    without arguments is shown in the reader's own words."""
    if not note.args:
        return Event(kind=note.kind, severity="info", step=0, tag="", message="note", args={"text": note.message})
    args = {k: Clauses(f"note.{note.kind}.{k}", tuple(v)) if isinstance(v, list) else v for k, v in note.args.items()}
    return Event(kind=note.kind, severity="info", step=0, tag="", message=f"note.{note.kind}", args=args)


def note_text(note: ReadNote, lang: str) -> str:
    """A reader's note in `lang`."""
    event = note_event(note)
    return text(event.message, lang, **_fields(event, lang))


def render_finding(event: Event, lang: str) -> dict[str, Any]:
    """The report's JSON object for `event` in `lang` (`http_api.md`, `report`)."""
    fields = _fields(event, lang)
    message = text(event.message, lang, **fields)
    evidence = json_safe(event.evidence)
    advice = None
    if event.advice:
        advice = text(event.advice, lang, **fields)
        message = text("join.advice", lang, message=message, advice=advice)
        evidence["advice"] = advice
    cause = event.evidence.get("cause")
    if cause:
        detail = text(f"cause.{cause}", lang, **fields)
        clause = text(f"cause.{cause}.advice", lang, **fields)
        evidence["cause_detail"] = detail
        evidence["cause_advice"] = text("sentence", lang, text=clause[:1].upper() + clause[1:])
        if advice is None:
            evidence["advice"] = evidence["cause_advice"]
            message = text("join.cause_try", lang, message=message, detail=detail, advice=clause)
        else:
            message = text("join.cause", lang, message=message, detail=detail)
    out: dict[str, Any] = {
        "kind": event.kind,
        "severity": event.severity,
        "step": int(event.step),
        "tag": event.tag,
        "message": message,
        "evidence": evidence,
    }
    if event.end_step is not None:
        out["end_step"] = int(event.end_step)
    return out


def render_run_report(report: dict[str, Any], lang: str) -> dict[str, Any]:
    """A run's report (`engine.analyze_runs(..., lang=None)`) with its events rendered."""
    return {**report, "findings": [render_finding(e, lang) for e in report["findings"]]}


def render_logdir_report(report: dict[str, Any], lang: str) -> dict[str, Any]:
    """A logdir report with its runs rendered and the language it is written in."""
    return {**report, "language": lang, "runs": [render_run_report(r, lang) for r in report["runs"]]}


def kind_labels(lang: str) -> dict[str, str]:
    """The short name of every kind the catalogue names (`kind.<name>`: the registry's kinds and
    the readers' notes) in `lang`, for the tab's badges and filters."""
    names = [message_id.removeprefix("kind.") for message_id in messages(LANGUAGES[0]) if message_id.startswith("kind.")]
    return {name: text(f"kind.{name}", lang) for name in sorted(names)}
