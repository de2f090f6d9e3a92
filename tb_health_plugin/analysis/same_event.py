"""Findings of different checks that describe one event, said once.

Each check judges its own series, so one event can surface in two of them. Where one finding
is the consequence of another by construction, the consequence stays in the report as `info`,
with `part_of` naming the finding that carries the alarm (and the cause and the advice):

* weights that stopped changing while the gradients vanished: an update is the learning rate
  times the gradient (times the optimiser's scaling), so a gradient norm that collapsed stops
  the weights it feeds. Two alarms for it would make one fault look like two; the stopped
  parameters stay listed in the `info` finding.
* a rise of the loss that recovered (a `divergence` with an end) around a non-finite episode
  that lies wholly inside it and ended too: the update that overflowed is what also threw the
  finite values around the NaN/Inf points up, as the spike detector's step 9 states for short
  excursions. The non-finite finding names the event, its first step and the advice (restart
  before it, lower the rate or the loss scale); a second alarm for the finite edges of the same
  blow-up would repeat it (issue 14: findings about one event must not repeat each other). A
  rise that does not end is the opposite case: there the non-finite end is part of the
  divergence (`checks/loss.py`). The non-finite finding's advice then restarts before the rise,
  not merely before the first NaN/Inf: the last finite point before an overflow is often the
  blow-up itself (zoo_seen3_059: 2.0 at step 1, 20 at step 2, Inf from step 3; "restart at or
  before step 2" named the first bad step).
"""

from __future__ import annotations

from dataclasses import replace

from tb_health_plugin.analysis.event import Event


def said_once(findings: list[Event]) -> list[Event]:
    """The findings, with those that are part of another one turned into `info` (module doc)."""
    alarms = [f for f in findings if f.severity != "info"]
    vanishing = [f for f in alarms if f.kind == "vanishing_gradients"]
    nonfinite = [f for f in alarms if f.kind == "nonfinite" and "part_of" not in f.evidence]
    if not vanishing and not nonfinite:
        return findings
    out = []
    restart_before: dict[int, int] = {}  # a non-finite finding's index in `nonfinite` -> a rise's last healthy step
    for finding in findings:
        holder = _edges_of_nonfinite(finding, nonfinite)
        if _stopped_by_vanishing(finding, vanishing):
            finding = _part_of(finding, "vanishing_gradients")
        elif holder is not None:
            finding = _part_of(finding, "nonfinite")
            healthy = finding.evidence.get("last_healthy_step")
            if healthy is not None:
                restart_before[holder] = min(int(healthy), restart_before.get(holder, int(healthy)))
        out.append(finding)
    for holder, healthy in restart_before.items():
        held = nonfinite[holder]
        if held.args.get("restart_step", healthy) > healthy:
            position = next(i for i, f in enumerate(out) if f is held)
            out[position] = replace(held, args={**held.args, "restart_step": healthy})
    return out


def _part_of(finding: Event, kind: str) -> Event:
    return replace(finding, severity="info", evidence={**finding.evidence, "part_of": kind})


def _stopped_by_vanishing(finding: Event, vanishing: list[Event]) -> bool:
    """A stopped-weights finding that the gradients' collapse began before it ended."""
    if finding.kind != "weight_updates" or finding.evidence.get("what") != "stopped":
        return False
    end = finding.end_step if finding.end_step is not None else finding.step
    return any(v.step <= end for v in vanishing)


def _edges_of_nonfinite(finding: Event, nonfinite: list[Event]) -> int | None:
    """The index in `nonfinite` of the whole, ended non-finite episode that a recovered rise of
    the loss holds, if it holds one."""
    if finding.kind != "divergence" or finding.severity == "info" or finding.end_step is None:
        return None
    for index, n in enumerate(nonfinite):
        if finding.step <= n.step and n.end_step is not None and n.end_step <= finding.end_step:
            return index
    return None
