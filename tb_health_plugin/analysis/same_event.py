"""Findings of different checks that describe one event, said once.

Each check judges its own series, so one event can surface in two of them. Where one finding
is the consequence of another by construction, the consequence stays in the report as `info`,
with `part_of` naming the finding that carries the alarm (and the cause and the advice):

* weights that stopped changing while the gradients vanished: an update is the learning rate
  times the gradient (times the optimiser's scaling), so a gradient norm that collapsed stops
  the weights it feeds. Two alarms for it would make one fault look like two; the stopped
  parameters stay listed in the `info` finding.
* weights that stopped changing, or changed by a large share of their norm each step, from a
  step inside a blow-up (from the loss's first NaN/Inf to its last, or over the recovered rise
  of the loss that holds them, the next case): the blow-up saturated, froze or tossed them (a
  tanh net under SGD at a rate of 15, its loss Inf at 9 of 29 points from step 20 to 110 within
  a rise from step 10 to 220, stopped moving its first three layers at step 150, never to move
  again, while its last layer moved by 17% of its norm a step). The non-finite finding already
  says to restart before it with a lower rate; an alarm for those weights would be a second one
  for the same blow-up (zoo_seen15_106). Weights that went wrong before the blow-up began keep
  their alarm: they may be its cause.
* a rise of the loss that recovered (a `divergence` with an end) around a non-finite episode
  that lies wholly inside it and ended too: the update that overflowed is what also threw the
  finite values around the NaN/Inf points up, as the spike detector's step 9 states for short
  excursions. The non-finite finding names the event, its first step and the advice (restart
  before it, lower the rate or the loss scale); a second alarm for the finite edges of the same
  blow-up would repeat it (issue 14: findings about one event must not repeat each other). The
  spike detector reports a recovered rise of up to a few hundred points as a long `loss_spike`
  (`climb_back`): one that holds the episode is the same edge (zoo_seen20_070: a rise from
  step 137 to 409, 73x above the best level, holding the Inf at step 181). A
  rise that does not end is the opposite case: there the non-finite end is part of the
  divergence (`checks/loss.py`). The non-finite finding's advice then restarts before the rise,
  not merely before the first NaN/Inf: the last finite point before an overflow is often the
  blow-up itself (zoo_seen3_059: 2.0 at step 1, 20 at step 2, Inf from step 3; "restart at or
  before step 2" named the first bad step). So does a divergence the run did not recover from
  after that blow-up (`divergence` step 10): both findings name one restart step (zoo_seen24_040:
  the divergence "at or before step 11", where its loss began to rise, and the non-finite
  finding "at or before step 18", the last finite point before the Inf).
"""

from __future__ import annotations

from dataclasses import replace

from tb_health_plugin.analysis.event import Event

RISES = ("divergence", "loss_spike")  # kinds that report a rise of the loss that recovered


def said_once(findings: list[Event]) -> list[Event]:
    """The findings, with those that are part of another one turned into `info` (module doc)."""
    alarms = [f for f in findings if f.severity != "info"]
    vanishing = [f for f in alarms if f.kind == "vanishing_gradients"]
    episodes = [f for f in alarms if f.kind == "nonfinite"]  # part of a divergence or not
    nonfinite = [f for f in episodes if "part_of" not in f.evidence]
    if not vanishing and not episodes:
        return findings
    edges = [f for f in findings if _edges_of_nonfinite(f, nonfinite)]
    spans = _blow_up_spans(episodes, edges)
    out = []
    for finding in findings:
        if _stopped_by_vanishing(finding, vanishing):
            finding = _part_of(finding, "vanishing_gradients")
        elif _updates_in(finding, spans) or any(finding is e for e in edges):
            finding = _part_of(finding, "nonfinite")
        out.append(finding)
    return [_restart_before_rises(f, out) if any(f is n for n in nonfinite) else f for f in out]


def _part_of(finding: Event, kind: str) -> Event:
    return replace(finding, severity="info", evidence={**finding.evidence, "part_of": kind})


def _stopped_by_vanishing(finding: Event, vanishing: list[Event]) -> bool:
    """A stopped-weights finding that the gradients' collapse began before it ended."""
    if finding.kind != "weight_updates" or finding.evidence.get("what") != "stopped":
        return False
    end = finding.end_step if finding.end_step is not None else finding.step
    return any(v.step <= end for v in vanishing)


def _blow_up_spans(episodes: list[Event], rises: list[Event]) -> list[tuple[int, int]]:
    """(first, last step) of each blow-up: a non-finite episode, widened to the recovered rises of
    the loss that hold it (the finite edges of the same event, below)."""
    spans = []
    for episode in episodes:
        first, last = episode.step, episode.end_step if episode.end_step is not None else episode.step
        for rise in rises:
            if _holds(rise, episode):
                first, last = min(first, rise.step), max(last, rise.end_step)
        spans.append((first, last))
    return spans


def _updates_in(finding: Event, spans: list[tuple[int, int]]) -> bool:
    """A finding of weights that stopped changing or changed by a large share of their norm each
    step, begun inside a blow-up (module doc)."""
    if finding.kind != "weight_updates":
        return False
    return any(first <= finding.step <= last for first, last in spans)


def _edges_of_nonfinite(finding: Event, nonfinite: list[Event]) -> bool:
    """A recovered rise of the loss that holds a whole, ended non-finite episode."""
    if finding.kind not in RISES or finding.severity == "info" or finding.end_step is None:
        return False
    return any(_holds(finding, n) for n in nonfinite)


def _holds(rise: Event, episode: Event) -> bool:
    return rise.step <= episode.step and episode.end_step is not None and episode.end_step <= rise.end_step


def _restart_before_rises(episode: Event, findings: list[Event]) -> Event:
    """The non-finite alarm whose advice restarts before the rises said as part of it, and before
    the rise of a divergence the run did not recover from after this blow-up (module doc)."""
    rises = [f for f in findings
             if (f.kind in RISES and f.evidence.get("part_of") == "nonfinite" and _holds(f, episode))
             or (f.kind == "divergence" and f.severity != "info" and f.evidence.get("nonfinite_from_step") == episode.step)]
    healthy = [r.evidence["last_healthy_step"] for r in rises if r.evidence.get("last_healthy_step") is not None]
    restart = episode.args.get("restart_step")
    if not healthy or restart is None or min(healthy) >= restart:
        return episode
    return replace(episode, args={**episode.args, "restart_step": int(min(healthy))})
