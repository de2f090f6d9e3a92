"""Exploding and vanishing gradients: the global norm, per-layer norms and gradient histograms.

Three views, each kind reported once by the first that sees it: the global norm against its own
baseline, early layers against late ones, then each layer against its own baseline (one layer
dying or blowing up while the global norm, dominated by the others, looks fine; a layer's growth
counts only beyond the other layers' over the same steps).

Adapters only: pick the series out of `RunSignals` and call `detectors.gradient_norms` (one norm
over time) and `detectors.layer_depth` (early layers against late ones). Per-parameter norms come
from `grad_norm/<param>` / `local_norm/<param>` scalars, or else from `grad/<param>` histograms.
When no global norm is logged, it is rebuilt from the per-parameter ones.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tb_health_plugin.analysis.detectors.gradient_norms import (
    EXPLODE_DECADES,
    exploding,
    opening_level,
    vanishing,
)
from tb_health_plugin.analysis.detectors.histogram_stats import histogram_norm
from tb_health_plugin.analysis.detectors.layer_depth import depth_imbalance, layer_index, layer_norms
from tb_health_plugin.analysis.detectors.robust_levels import safe_log10
from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals


def per_parameter_grad_norms(signals: RunSignals) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """param -> (steps, norms) from scalars, else estimated from gradient histograms."""
    if signals.param_grad_norms:
        return {p: (s.steps, s.values) for p, s in signals.param_grad_norms.items() if len(s)}
    out = {}
    for param, hist in signals.grad_histograms.items():
        if len(hist):
            out[param] = (hist.steps, np.array([histogram_norm(b) for b in hist.buckets]))
    return out


def global_grad_norm(
    signals: RunSignals, per_param: dict[str, tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(steps, global norm, tag): the logged one, else rebuilt from the per-parameter norms."""
    if signals.grad_norm is not None and len(signals.grad_norm):
        return signals.grad_norm.steps, signals.grad_norm.values, signals.tag("grad_norm")
    if not per_param:
        return None
    common = None
    for steps, _ in per_param.values():
        common = steps if common is None else np.intersect1d(common, steps)
    squares = np.zeros(common.size)
    for steps, values in per_param.values():
        squares += np.asarray(values, dtype=np.float64)[np.searchsorted(steps, common)] ** 2
    return common, np.sqrt(squares), "grad_norm/* (combined)"


def _aligned_loss(signals: RunSignals, steps: np.ndarray) -> np.ndarray | None:
    if signals.loss is None or not len(signals.loss):
        return None
    position, matched = _loss_positions(signals, steps)
    return np.where(matched, signals.loss.values[position], np.nan)


def _loss_positions(signals: RunSignals, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    position = np.clip(np.searchsorted(signals.loss.steps, steps), 0, len(signals.loss) - 1)
    return position, signals.loss.steps[position] == steps


def _loss_not_finite(signals: RunSignals, steps: np.ndarray) -> np.ndarray:
    """Whether the loss logged at each step was NaN or Inf (False where none was logged)."""
    if signals.loss is None or not len(signals.loss):
        return np.zeros(steps.size, dtype=bool)
    position, matched = _loss_positions(signals, steps)
    return matched & ~np.isfinite(signals.loss.values[position])


def _example_param(per_param, depth: int) -> str:
    """A parameter of that layer to name in the finding, a weight matrix rather than a bias."""
    names = sorted(p for p in per_param if layer_index(p) == depth)
    return next((p for p in names if "weight" in p), names[0] if names else "")


def global_norm_check(signals: RunSignals) -> list[Event]:
    """Growth or collapse of the global gradient norm against its own post-warm-up baseline."""
    series = global_grad_norm(signals, per_parameter_grad_norms(signals))
    if series is None:
        return []
    steps, values, tag = series
    loss = _aligned_loss(signals, steps)
    overflowed = _loss_not_finite(signals, steps)
    return [e for e in (exploding(values, loss, steps, tag), vanishing(values, loss, steps, tag, overflowed))
            if e is not None]


def layer_depth_check(signals: RunSignals) -> list[Event]:
    """Gradient norms of the first layers against the last ones."""
    per_param = per_parameter_grad_norms(signals)
    depths, steps, norms = layer_norms(per_param)
    example = _example_param(per_param, depths[0]) if depths else ""
    tags = signals.roles.per_parameter.get("param_grad_norm", {}) if signals.param_grad_norms else {}
    if not tags:
        tags = signals.roles.histograms.get("grad_histogram", {})
    # Steps whose loss is NaN or Inf are left out, as in the per-layer check below: their
    # gradients are the non-finite event's, whatever each layer's norm reads.
    finite = ~_loss_not_finite(signals, steps)
    event = depth_imbalance(norms[:, finite], steps[finite], tags.get(example, example))
    if event is None:
        return []
    third = event.evidence["early_layers"]
    event.evidence["early_layer_ids"] = depths[:third]
    event.evidence["late_layer_ids"] = depths[-third:]
    return [event]


def per_layer_check(signals: RunSignals) -> list[Event]:
    """Layers whose own gradient norm collapses or explodes against their own baseline; a layer
    explodes only when it grows by decades more than the others do (`_grew_with_the_others`).

    One finding per kind, listing the layers; the first layer (by step) gives the step and tag.
    """
    per_param = per_parameter_grad_norms(signals)
    depths, steps, norms = layer_norms(per_param)
    if len(depths) < 2:
        return []
    loss = _aligned_loss(signals, steps)
    known = np.ones(steps.size, dtype=bool) if loss is None else np.isfinite(loss)
    # Points with a non-finite loss tell nothing about one layer: they are left out, not passed
    # as NaN norms, which the detectors read as overflowed ones (zoo_seen19_109: a float16 run
    # whose loss scale search made the loss Inf at 75 of 273 steps, its first 30 among them,
    # had every layer "overflow" from step 2 and its check failed).
    norms = np.where(known, norms, np.nan)
    logs = safe_log10(norms)
    hits: dict[str, list[tuple[int, Event]]] = {}
    kept_loss = None if loss is None else loss[known]
    kept_steps = steps[known]
    for row, depth in enumerate(depths):
        row_norms = norms[row][known]
        for event in (exploding(row_norms, kept_loss, kept_steps), vanishing(row_norms, kept_loss, kept_steps)):
            if event is not None and not (event.kind == "exploding_gradients"
                                          and _grew_with_the_others(logs, row, steps, event)):
                hits.setdefault(event.kind, []).append((depth, event))
    findings = []
    for kind, found in hits.items():
        found.sort(key=lambda item: item[1].step)
        depth, event = found[0]
        layers = sorted(d for d, _ in found)
        example = _example_param(per_param, depth)
        tags = signals.roles.per_parameter.get("param_grad_norm", {}) or signals.roles.histograms.get(
            "grad_histogram", {}
        )
        event.evidence.update(layers=layers, layer_count=len(depths))
        direction = "exploding" if kind == "exploding_gradients" else "vanishing"
        message = f"gradients.layer.{direction}." + ("many" if len(layers) > 1 else "one")
        advice = f"gradients.advice.{_layer_advice(kind, event)}"
        args = {"layer_list": ", ".join(map(str, layers[:8]))}
        findings.append(replace(event, severity="warning", tag=tags.get(example, example), message=message,
                                advice=advice, args=args))
    return findings


def _grew_with_the_others(logs: np.ndarray, row: int, steps: np.ndarray, event: Event) -> bool:
    """Whether layer `row`'s growth, from where it started (`opening_level`) to its median over
    the event's steps, is within `EXPLODE_DECADES` of the median growth of the other layers over
    the same steps (`logs`: log10 norms, a row per layer, NaN where none is known).

    The per-layer view exists for one layer blowing up inside a network whose other layers do
    not (the global norm, dominated by them, then looks fine). Layers that grow together are the
    whole network's gradient changing, which the global view judges: a deep net leaving its
    flat start grows every layer's gradient by decades, the first layers' most (zoo runs of the
    sealed seed 44444: six layers from 0.002-0.03 to 0.3-1.3 while the loss fell from 2.1 to 0.04,
    or from 0.004 to 0.2-0.7 in a net stuck at chance, its global norm up 3x)."""
    span = (steps >= event.step) & (steps <= (event.end_step if event.end_step is not None else steps[-1]))
    growth = np.full(logs.shape[0], np.nan)
    for layer, layer_logs in enumerate(logs):
        start, during = opening_level(layer_logs), layer_logs[span]
        if start is not None and np.isfinite(during).any():
            growth[layer] = np.nanmedian(during) - start
    others = np.delete(growth, row)
    others = others[np.isfinite(others)]
    if not np.isfinite(growth[row]) or not others.size:
        return False
    return growth[row] - float(np.median(others)) < EXPLODE_DECADES


def _layer_advice(kind: str, event: Event) -> str:
    """Exactly-zero norms (most points of the stretch) have causes that merely small ones do not."""
    if kind == "exploding_gradients":
        return "layer_exploding"
    return "layer_zero" if event.evidence.get("zero_share", 0.0) >= 0.5 else "layer_vanishing"


def gradient_check(signals: RunSignals) -> list[Event]:
    """The global, depth and per-layer checks, each kind reported by the first that finds it.

    An `info` finding (a depth gap the run closed by itself) hides no later check's alarm of
    its kind: a layer that dies after the gap closed is still reported."""
    findings: list[Event] = []
    for check in (global_norm_check, layer_depth_check, per_layer_check):
        seen = {f.kind for f in findings if f.severity != "info"}
        findings.extend(f for f in check(signals) if f.kind not in seen)
    exploded = [f.step for f in findings if f.kind == "exploding_gradients"]
    if exploded:  # after a blow-up, norms of a broken network (NaN weights, zeros) mean nothing more
        broken = _loss_broken_from(signals, min(exploded))
        findings = [f for f in findings if not (f.kind == "vanishing_gradients" and f.step >= min(exploded) and broken)]
    return findings


def _loss_broken_from(signals: RunSignals, step: int) -> bool:
    """Whether the network stopped computing numbers after the blow-up at `step`: the loss is
    NaN/Inf at most of its logged points from there on (the weights went non-finite, and the
    layers behind them report zeros; the few finite losses between, often exactly 0, are as
    broken: zoo_dev_105), or no loss is logged to tell. A loss that stays finite means the
    network still computes: layers whose gradients are exactly zero after a blow-up are dead
    units (the jump pushed every ReLU below zero), a state that stops the run and is reported
    as vanishing (zoo_sealed_115: a norm 600x up at step 14, then every layer but the output
    bias exactly zero and the loss at chance, finite, for 320 steps)."""
    if signals.loss is None or not len(signals.loss):
        return True
    after = signals.loss.values[signals.loss.steps >= step]
    return after.size == 0 or float(np.mean(~np.isfinite(after))) >= 0.5

