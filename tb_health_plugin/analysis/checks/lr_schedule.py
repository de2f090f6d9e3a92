"""`lr_schedule` findings from the logged learning rate (adapter over `detectors.lr_fit`).

A planned schedule (warm-up and decay, step decay, one-cycle, SGDR with or without growing
periods, cyclic rates) is one `info` finding naming its shape; faults are warnings or critical.

Resumes come from the readers' backtracks (steps that went back); a reset at such a step is
reported as a scheduler state that was not restored.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.lr_fit import analyze_lr
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.analysis.signals import RunSignals


def lr_schedule_check(signals: RunSignals) -> list[Event]:
    """Resets, jumps, an early zero and an early floor in the logged learning rate."""
    series = signals.lr
    if series is None or not len(series):
        return []
    resumes = [b.to_step for b in signals.data.backtracks]
    analysis = analyze_lr(series.steps, series.values, resumes)
    if analysis is None:
        return []
    steps = series.steps[np.isfinite(series.values)]
    tag = signals.tag("lr")
    warm_step = int(steps[analysis.warmup_end_index])
    findings = [
        Event(
            kind="lr_schedule",
            severity="info",
            step=int(steps[0]),
            end_step=int(steps[-1]),
            tag=tag,
            message="lr_schedule.shape.warmup" if analysis.warmup_end_index > 0 else "lr_schedule.shape",
            args={"shape": Phrase(f"lr_schedule.name.{analysis.shape}")},
            evidence={
                "schedule": analysis.shape,
                "warmup_end_step": warm_step,
                "peak_lr": analysis.peak,
                "floor_lr": analysis.floor,
            },
        )
    ]
    for problem in analysis.problems:
        step = int(problem.evidence.get("first_nonfinite_step", steps[problem.index]))
        evidence = dict(problem.evidence, what=problem.what, schedule=analysis.shape)
        message = f"lr_schedule.{problem.what}"
        if problem.what == "reset":
            message += ".after_resume" if problem.evidence["after_resume"] else ".outside_warmup"
        findings.append(
            Event(
                kind="lr_schedule",
                severity=problem.severity,
                step=step,
                end_step=int(steps[problem.end_index]),
                tag=tag,
                message=message,
                evidence=evidence,
                args={"shape": Phrase(f"lr_schedule.name.{analysis.shape}")},
                advice=f"lr_schedule.advice.{problem.what}",
            )
        )
    return findings

