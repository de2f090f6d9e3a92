"""`loss_scale` findings from the logged loss scale and overflow flag (adapter over
`detectors.loss_scale`). The normal fp16 saw-tooth and the scaler's initial search are not
findings."""

from __future__ import annotations

from tb_health_plugin.analysis.detectors.loss_scale import analyze_loss_scale
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals


def loss_scale_check(signals: RunSignals) -> list[Event]:
    """Overflow storms, steady decline and collapse of the dynamic loss scale."""
    series = signals.loss_scale
    if series is None or not len(series):
        return []
    overflow = None
    if signals.overflow is not None and len(signals.overflow):
        overflow = (signals.overflow.steps, signals.overflow.values)
    return analyze_loss_scale(series.steps, series.values, overflow, signals.tag("loss_scale"))

