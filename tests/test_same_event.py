"""`same_event.said_once`: which findings are the edges of a non-finite episode, and which are not."""

from __future__ import annotations

from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.same_event import said_once


def _event(kind: str, severity: str, step: int, end_step: int | None) -> Event:
    return Event(kind=kind, severity=severity, step=step, tag="loss", message="m", end_step=end_step)


def test_only_a_recovered_rise_that_holds_the_whole_ended_episode_is_part_of_it():
    nan = _event("nonfinite", "critical", 425, 426)
    around = said_once([_event("divergence", "warning", 417, 457), nan])
    assert [(f.kind, f.severity, f.evidence.get("part_of")) for f in around] == [
        ("divergence", "info", "nonfinite"), ("nonfinite", "critical", None)]
    # the episode goes on after the rise ended (the run went non-finite again): two events
    longer = _event("nonfinite", "critical", 465, 599)
    assert said_once([_event("divergence", "warning", 418, 506), longer])[0].severity == "warning"
    # a rise that never ended is the divergence itself: it keeps its alarm
    assert said_once([_event("divergence", "critical", 417, None), nan])[0].severity == "critical"
    # a non-finite end already folded into a divergence does not fold anything back
    folded = Event(kind="nonfinite", severity="critical", step=425, tag="loss", message="m",
                   end_step=426, evidence={"part_of": "divergence"})
    assert said_once([_event("divergence", "warning", 417, 457), folded])[0].severity == "warning"
