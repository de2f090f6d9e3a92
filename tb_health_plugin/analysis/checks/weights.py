"""Weight findings from `update_ratio/<param>`, `weight_norm/<param>` and `weight/<param>` histograms.

Adapters over `detectors.update_ratio`. Parameters with the same problem are reported together
in one finding (first step over all of them, the parameters listed in the evidence), so a model
with 200 frozen tensors yields one line, not 200.

Kinds added to the contract's list: `weight_updates` (updates too large for the weights, or
weights that stopped changing) and `weight_distribution` (weights drifting away from their
scale, or piling up against the edges of their range).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.histogram_stats import edge_share, histogram_norm
from tb_health_plugin.analysis.detectors.update_ratio import (
    WeightEvent,
    drift,
    is_matrix_like,
    large_updates,
    saturation,
    stopped_by_norm,
    stopped_by_ratio,
)
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.analysis.signals import RunSignals

MAX_LISTED = 10
KIND = {
    "large_updates": "weight_updates",
    "stopped": "weight_updates",
    "drift": "weight_distribution",
    "saturation": "weight_distribution",
}


def _lr_share(signals: RunSignals, steps: np.ndarray) -> np.ndarray | None:
    lr = signals.lr
    if lr is None or not len(lr) or not np.isfinite(lr.values).any():
        return None
    peak = np.nanmax(np.abs(lr.values))
    if peak <= 0:
        return np.zeros(steps.size)
    position = np.clip(np.searchsorted(lr.steps, steps, side="right") - 1, 0, len(lr) - 1)
    return np.abs(lr.values[position]) / peak


def _events(signals: RunSignals) -> list[tuple[str, str, np.ndarray, WeightEvent]]:
    """(param, tag, steps, event) for every weight problem found."""
    found = []
    for param, series in signals.param_update_ratios.items():
        share = _lr_share(signals, series.steps)
        for event in (large_updates(series.values), stopped_by_ratio(series.values, share)):
            if event is not None:
                found.append((param, f"update_ratio/{param}", series.steps, event))
    for param, series in signals.param_weight_norms.items():
        if param not in signals.param_update_ratios:
            event = stopped_by_norm(series.values, _lr_share(signals, series.steps))
            if event is not None:
                found.append((param, f"weight_norm/{param}", series.steps, event))
        if is_matrix_like(param):
            event = drift(series.values)
            if event is not None:
                found.append((param, f"weight_norm/{param}", series.steps, event))
    for param, hist in signals.weight_histograms.items():
        tag = signals.roles.histograms.get("weight_histogram", {}).get(param, f"weight/{param}")
        if param not in signals.param_weight_norms:
            norms = np.array([histogram_norm(b) for b in hist.buckets])
            # identical histograms give identical norm estimates: a weight that stopped changing
            checks = (drift(norms), stopped_by_norm(norms, _lr_share(signals, hist.steps)))
            for event in checks if is_matrix_like(param) else checks[1:]:
                if event is not None:
                    found.append((param, tag, hist.steps, event))
        event = saturation(np.array([edge_share(b) for b in hist.buckets]))
        if event is not None:
            found.append((param, tag, hist.steps, event))
    return found


def _names(params: list[str]) -> dict:
    """The message arguments naming the parameters: the first three, then how many more."""
    return {
        "names": Phrase("weights.names.more" if len(params) > 3 else "weights.names"),
        "names_listed": ", ".join(params[:3]),
        "names_more": len(params) - 3,
    }


def weights_check(signals: RunSignals) -> list[Event]:
    """Update ratios, stopped weights, drift and saturation, one finding per problem type."""
    grouped: dict[str, list[tuple[str, str, np.ndarray, WeightEvent]]] = {}
    for item in _events(signals):
        grouped.setdefault(item[3].what, []).append(item)
    findings = []
    for what, items in grouped.items():
        items.sort(key=lambda item: int(item[2][item[3].index]))
        param, tag, steps, event = items[0]
        params = sorted({item[0] for item in items})
        step = int(steps[event.index])
        findings.append(
            Event(
                kind=KIND[what],
                severity="warning",
                step=step,
                end_step=int(max(item[2][item[3].end_index] for item in items)),
                tag=tag,
                message=f"weights.{what}",
                args=_names(params),
                advice=f"weights.advice.{what}",
                evidence=dict(
                    event.evidence,
                    what=what,
                    parameters=params[:MAX_LISTED],
                    parameter_count=len(params),
                    monitored=len(
                        set(signals.param_update_ratios)
                        | set(signals.param_weight_norms)
                        | set(signals.weight_histograms)
                    ),
                ),
            )
        )
    return findings

