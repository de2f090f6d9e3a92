"""Weight findings from `update_ratio/<param>`, `weight_norm/<param>` and `weight/<param>` histograms.

Adapters over `detectors.update_ratio`. Parameters with the same problem are reported together
in one finding (first step over all of them, the parameters listed in the evidence), so a model
with 200 frozen tensors yields one line, not 200.

Kinds added to the contract's list: `weight_updates` (updates too large for the weights, or
weights that stopped changing) and `weight_distribution` (weights drifting away from their
scale, or piling up against the edges of their range).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tb_health_plugin.analysis.detectors.histogram_stats import edge_share, histogram_norm
from tb_health_plugin.analysis.detectors.update_ratio import (
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


def _lr_share(signals: RunSignals, steps: np.ndarray) -> np.ndarray | None:
    lr = signals.lr
    if lr is None or not len(lr) or not np.isfinite(lr.values).any():
        return None
    peak = np.nanmax(np.abs(lr.values))
    if peak <= 0:
        return np.zeros(steps.size)
    position = np.clip(np.searchsorted(lr.steps, steps, side="right") - 1, 0, len(lr) - 1)
    return np.abs(lr.values[position]) / peak


def _events(signals: RunSignals) -> list[tuple[str, Event]]:
    """(param, event) for every weight problem found."""
    found = []
    for param, series in signals.param_update_ratios.items():
        share = _lr_share(signals, series.steps)
        steps, tag = series.steps, f"update_ratio/{param}"
        if is_matrix_like(param):  # the 1e-3 rule of thumb is a matrix's; a bias starts at 0
            found.append((param, large_updates(series.values, steps, tag)))
        found.append((param, stopped_by_ratio(series.values, share, steps, tag)))
    for param, series in signals.param_weight_norms.items():
        steps, tag = series.steps, f"weight_norm/{param}"
        if param not in signals.param_update_ratios:
            found.append((param, stopped_by_norm(series.values, _lr_share(signals, steps), steps, tag)))
        if is_matrix_like(param):
            found.append((param, drift(series.values, steps, tag)))
    for param, hist in signals.weight_histograms.items():
        steps = hist.steps
        tag = signals.roles.histograms.get("weight_histogram", {}).get(param, f"weight/{param}")
        if param not in signals.param_weight_norms:
            norms = np.array([histogram_norm(b) for b in hist.buckets])
            # identical histograms give identical norm estimates: a weight that stopped changing
            checks = (drift(norms, steps, tag), stopped_by_norm(norms, _lr_share(signals, steps), steps, tag))
            found += [(param, e) for e in (checks if is_matrix_like(param) else checks[1:])]
        found.append((param, saturation(np.array([edge_share(b) for b in hist.buckets]), steps, tag)))
    return [(param, event) for param, event in found if event is not None]


def _names(params: list[str]) -> dict:
    """The message arguments naming the parameters: the first three, then how many more."""
    return {
        "names": Phrase("weights.names.more" if len(params) > 3 else "weights.names"),
        "names_listed": ", ".join(params[:3]),
        "names_more": len(params) - 3,
    }


def weights_check(signals: RunSignals) -> list[Event]:
    """Update ratios, stopped weights, drift and saturation, one finding per problem type."""
    grouped: dict[str, list[tuple[str, Event]]] = {}
    for param, event in _events(signals):
        grouped.setdefault(event.evidence["what"], []).append((param, event))
    findings = []
    for items in grouped.values():
        items.sort(key=lambda item: item[1].step)
        event = items[0][1]
        params = sorted({param for param, _ in items})
        monitored = set(signals.param_update_ratios) | set(signals.param_weight_norms) | set(signals.weight_histograms)
        findings.append(
            replace(
                event,
                end_step=max(e.end_step for _, e in items),
                args=_names(params),
                evidence=dict(
                    event.evidence, parameters=params[:MAX_LISTED], parameter_count=len(params), monitored=len(monitored)
                ),
            )
        )
    return findings
