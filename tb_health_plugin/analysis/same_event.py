"""Findings of different checks that describe one event, said once.

Each check judges its own series, so one event can surface in two of them. Where one finding
is the consequence of another by construction, the consequence stays in the report as `info`,
with `part_of` naming the finding that carries the alarm (and the cause and the advice):

* weights that stopped changing while the gradients vanished: an update is the learning rate
  times the gradient (times the optimiser's scaling), so a gradient norm that collapsed stops
  the weights it feeds. Two alarms for it would make one fault look like two; the stopped
  parameters stay listed in the `info` finding.
"""

from __future__ import annotations

from dataclasses import replace

from tb_health_plugin.analysis.event import Event


def said_once(findings: list[Event]) -> list[Event]:
    """The findings, with those that are part of another one turned into `info` (module doc)."""
    vanishing = [f for f in findings if f.kind == "vanishing_gradients" and f.severity != "info"]
    if not vanishing:
        return findings
    out = []
    for finding in findings:
        if _stopped_by_vanishing(finding, vanishing):
            finding = replace(finding, severity="info", evidence={**finding.evidence, "part_of": "vanishing_gradients"})
        out.append(finding)
    return out


def _stopped_by_vanishing(finding: Event, vanishing: list[Event]) -> bool:
    """A stopped-weights finding that the gradients' collapse began before it ended."""
    if finding.kind != "weight_updates" or finding.evidence.get("what") != "stopped":
        return False
    end = finding.end_step if finding.end_step is not None else finding.step
    return any(v.step <= end for v in vanishing)
