"""`lr_schedule` findings from the logged learning rate (adapter over `detectors.lr_fit`).

A planned schedule (warm-up and decay, step decay, one-cycle, SGDR with or without growing
periods, cyclic rates) is one `info` finding naming its shape; faults are warnings or critical.

Resumes come from the readers' backtracks (steps that went back); a reset at such a step is
reported as a scheduler state that was not restored.
"""

from __future__ import annotations

from tb_health_plugin.analysis.detectors.lr_fit import analyze_lr
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals


def lr_schedule_check(signals: RunSignals) -> list[Event]:
    """The schedule's shape (info), then resets, jumps, an early zero and an early floor."""
    series = signals.lr
    if series is None or not len(series):
        return []
    resumes = [b.to_step for b in signals.data.backtracks]
    return analyze_lr(series.steps, series.values, resumes, signals.tag("lr"))
