"""`loss_scale` findings from the logged loss scale and overflow flag (adapter over
`detectors.loss_scale`). The normal fp16 saw-tooth and the scaler's initial search are not
findings."""

from __future__ import annotations

from tb_health_plugin.analysis.detectors.loss_scale import ScaleProblem, analyze_loss_scale
from tb_health_plugin.analysis.findings import Finding
from tb_health_plugin.analysis.signals import RunSignals

ADVICE = {
    "overflow_rate": (
        "Lower the learning rate or clip gradients; if it persists, train in bf16 or keep the "
        "overflowing layers (softmax, norms, loss) in fp32."
    ),
    "decline": (
        "Gradients overflow more often than the scale can regrow: lower the learning rate, clip "
        "gradients, or check for layers producing huge activations."
    ),
    "floor": (
        "The loss scale is at its configured floor and steps still overflow (and are skipped): "
        "find the operation overflowing in fp16 and keep it in fp32, lower the learning rate, or use bf16."
    ),
    "collapse": (
        "The loss scale hit its minimum: the model overflows even unscaled; stop and look for "
        "exploding activations or gradients, or switch to bf16."
    ),
}


def _message(problem: ScaleProblem, step: int) -> str:
    e = problem.evidence
    if problem.what == "overflow_rate":
        return (
            f"{100 * e['skip_rate']:.1f}% of steps overflowed and were skipped after step {step} "
            f"(healthy dynamic scaling skips about 0.1%)."
        )
    if problem.what == "decline":
        return (
            f"The loss scale fell from {e['scale_from']:.3g} to {e['scale_to']:.3g} from step {step} "
            f"without regrowing."
        )
    if problem.what == "floor":
        return (
            f"The loss scale is stuck at its floor ({e['floor_scale']:.3g}) from step {step}: "
            f"{100 * e['skip_rate_at_floor']:.0f}% of the steps logged there overflowed."
        )
    return f"The loss scale collapsed to {e['min_scale']:.3g} at step {step} (it was {e['max_scale']:.3g})."


def loss_scale_check(signals: RunSignals) -> list[Finding]:
    """Overflow storms, steady decline and collapse of the dynamic loss scale."""
    series = signals.loss_scale
    if series is None or not len(series):
        return []
    overflow = None
    if signals.overflow is not None and len(signals.overflow):
        overflow = (signals.overflow.steps, signals.overflow.values)
    findings = []
    for problem in analyze_loss_scale(series.steps, series.values, overflow):
        step = int(series.steps[problem.index])
        advice = ADVICE[problem.what]
        findings.append(
            Finding(
                kind="loss_scale",
                severity=problem.severity,
                step=step,
                end_step=int(series.steps[problem.end_index]),
                tag=signals.tag("loss_scale"),
                message=f"{_message(problem, step)} {advice}",
                evidence=dict(problem.evidence, what=problem.what, advice=advice),
            )
        )
    return findings


RUN_CHECKS = [loss_scale_check]
JOB_CHECKS: list = []
