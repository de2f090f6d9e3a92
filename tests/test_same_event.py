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


def _weights(what: str, step: int) -> Event:
    return Event(kind="weight_updates", severity="warning", step=step, tag="0.weight", message="m",
                 end_step=250, evidence={"what": what})


def test_weights_that_stop_or_lurch_inside_a_blow_up_are_part_of_it():
    """zoo_seen15_106: a loss Inf at points from step 20 to 110, inside a rise from step 10 to 220;
    its first layers stopped moving and its last moved by 17% of its norm a step from step 150."""
    blow_up = [_event("divergence", "warning", 10, 220), _event("nonfinite", "critical", 20, 110)]
    found = said_once([*blow_up, _weights("stopped", 150), _weights("large_updates", 150), _weights("stopped", 5)])
    weights = [(f.evidence["what"], f.step, f.severity, f.evidence.get("part_of")) for f in found
               if f.kind == "weight_updates"]
    assert weights == [("stopped", 150, "info", "nonfinite"), ("large_updates", 150, "info", "nonfinite"),
                       ("stopped", 5, "warning", None)]  # before the blow-up: maybe its cause
    # the episode alone (no rise around it) bounds the blow-up; after it, weights keep their alarm
    alone = said_once([_event("nonfinite", "critical", 20, 110), _weights("stopped", 100), _weights("stopped", 150)])
    assert [f.severity for f in alone if f.kind == "weight_updates"] == ["info", "warning"]
    # a non-finite end that is part of a divergence still bounds its blow-up (zoo_sealed_099 of 43172)
    folded = Event(kind="nonfinite", severity="critical", step=12, tag="loss", message="m", end_step=451,
                   evidence={"part_of": "divergence"})
    assert said_once([folded, _weights("stopped", 250)])[1].severity == "info"



def test_a_long_spike_that_holds_the_episode_is_part_of_it():
    """zoo_seen20_070: a recovered rise from step 137 to 409, reported as a long spike (73x above
    the best level), held the Inf at step 181."""
    inf = _event("nonfinite", "critical", 181, 181)
    held = said_once([_event("loss_spike", "warning", 137, 409), inf])
    assert [(f.kind, f.severity, f.evidence.get("part_of")) for f in held] == [
        ("loss_spike", "info", "nonfinite"), ("nonfinite", "critical", None)]
    # a spike that does not hold the whole episode is another event
    assert said_once([_event("loss_spike", "warning", 170, 190), _event("nonfinite", "critical", 175, 260)])[0] \
        .severity == "warning"


def test_a_blow_up_the_run_did_not_recover_from_names_one_restart_step():
    """zoo_seen24_040: its loss rose from step 12 and went Inf from step 19; the divergence said
    "restart at or before step 11", the non-finite finding "at or before step 18"."""
    nan = Event(kind="nonfinite", severity="critical", step=19, tag="loss", message="m", end_step=300,
                args={"restart_step": 18})
    not_recovered = Event(kind="divergence", severity="critical", step=12, tag="loss", message="m",
                          evidence={"nonfinite_from_step": 19, "last_healthy_step": 11})
    found = said_once([not_recovered, nan])
    assert [(f.kind, f.severity) for f in found] == [("divergence", "critical"), ("nonfinite", "critical")]
    assert found[1].args["restart_step"] == 11
    # a divergence of another blow-up leaves this one's advice alone
    other = Event(kind="divergence", severity="critical", step=12, tag="loss", message="m",
                  evidence={"nonfinite_from_step": 400, "last_healthy_step": 11})
    assert said_once([other, nan])[1].args["restart_step"] == 18
