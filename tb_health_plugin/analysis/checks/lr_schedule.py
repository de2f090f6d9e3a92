"""`lr_schedule` findings from the logged learning rate (adapter over `detectors.lr_fit`).

A planned schedule (warm-up and decay, step decay, one-cycle, SGDR with or without growing
periods, cyclic rates) is one `info` finding naming its shape; faults are warnings or critical.

Resumes come from the readers' backtracks (steps that went back); a reset at such a step is
reported as a scheduler state that was not restored.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.lr_fit import LrAnalysis, LrProblem, analyze_lr
from tb_health_plugin.analysis.findings import Finding
from tb_health_plugin.analysis.signals import RunSignals


def _message(problem: LrProblem, step: int, analysis: LrAnalysis) -> tuple[str, str]:
    e = problem.evidence
    if problem.what == "reset":
        when = "after the resume" if e["after_resume"] else "outside warm-up"
        return (
            f"The learning rate restarted its schedule at step {step} {when} "
            f"({e['lr_before']:.3g} -> {e['lr_after']:.3g}).",
            "Restore the scheduler state (or its step count) together with the weights when resuming.",
        )
    if problem.what == "jump":
        return (
            f"The learning rate jumped up at step {step}, outside warm-up ({e['lr_before']:.3g} -> "
            f"{e['lr_after']:.3g}).",
            "Check the schedule configuration and any code that sets the learning rate by hand.",
        )
    if problem.what == "nonfinite":
        return (
            f"The learning rate is not finite from step {e['first_nonfinite_step']} "
            f"({e['nonfinite_points']} logged points): every update it touches is NaN.",
            "Check the schedule's arithmetic (a division by a zero step count or warm-up length) and "
            "any code that sets the learning rate by hand.",
        )
    if problem.what == "zero":
        return (
            f"The learning rate is zero from step {step}: the remaining steps do not train.",
            "Stop the run or fix the schedule's total/decay steps so the rate reaches zero at the end.",
        )
    return (
        f"The learning rate reached its floor ({e['floor_lr']:.3g}) at step {step} and stays there for "
        f"{100 * e['share_at_floor']:.0f}% of the run; the {analysis.shape} decay ran about "
        f"{e['speedup_estimate']:.1f}x too fast.",
        "Check that the scheduler steps once per optimizer step (not per micro-batch or device) and "
        "that its total steps match the run.",
    )


def lr_schedule_check(signals: RunSignals) -> list[Finding]:
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
    warmup = f"a warm-up to step {warm_step}, then " if analysis.warmup_end_index > 0 else ""
    findings = [
        Finding(
            kind="lr_schedule",
            severity="info",
            step=int(steps[0]),
            end_step=int(steps[-1]),
            tag=tag,
            message=f"The learning rate follows {warmup}a {analysis.shape} schedule "
            f"(peak {analysis.peak:.3g}, lowest {analysis.floor:.3g}).",
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
        message, advice = _message(problem, step, analysis)
        evidence = dict(problem.evidence, what=problem.what, schedule=analysis.shape, advice=advice)
        findings.append(
            Finding(
                kind="lr_schedule",
                severity=problem.severity,
                step=step,
                end_step=int(steps[problem.end_index]),
                tag=tag,
                message=f"{message} {advice}",
                evidence=evidence,
            )
        )
    return findings


RUN_CHECKS = [lr_schedule_check]
JOB_CHECKS: list = []
