"""A run's series arranged by role, the single input of every check.

Checks never look tags up themselves: `RunSignals.from_run` resolves the roles once (see
`tb_health_plugin.roles`) and converts units (MindFormers' `iteration-time` is in seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tb_health_plugin.roles import RoleMap, resolve_roles
from tb_health_plugin.run_data import HistogramSeries, RunData, ScalarSeries

MS_PER_SECOND = 1000.0


@dataclass
class RunSignals:
    run: str
    roles: RoleMap
    data: RunData
    loss: ScalarSeries | None = None
    lr: ScalarSeries | None = None
    grad_norm: ScalarSeries | None = None
    loss_scale: ScalarSeries | None = None
    overflow: ScalarSeries | None = None
    step_time_ms: ScalarSeries | None = None
    host_time_ms: ScalarSeries | None = None  # per-step time outside the compiled step (our hooks)
    throughput: ScalarSeries | None = None
    eval_loss: ScalarSeries | None = None
    loss_max: ScalarSeries | None = None  # window maximum of every step's loss (our hooks)
    loss_min: ScalarSeries | None = None
    grad_norm_max: ScalarSeries | None = None
    nonfinite_count: ScalarSeries | None = None
    overflow_count: ScalarSeries | None = None  # steps per window the loss scaler skipped (our hooks)
    param_grad_norms: dict[str, ScalarSeries] = field(default_factory=dict)
    param_weight_norms: dict[str, ScalarSeries] = field(default_factory=dict)
    param_update_ratios: dict[str, ScalarSeries] = field(default_factory=dict)
    grad_histograms: dict[str, HistogramSeries] = field(default_factory=dict)
    weight_histograms: dict[str, HistogramSeries] = field(default_factory=dict)

    def tag(self, role: str) -> str:
        """The tag that supplied a scalar role, for a finding's `tag` field."""
        return self.roles.scalars.get(role, role)

    @classmethod
    def from_run(cls, data: RunData, overrides: dict[str, str] | None = None) -> RunSignals:
        roles = resolve_roles(data.scalars.keys(), data.histograms.keys(), overrides)
        signals = cls(run=data.name, roles=roles, data=data)
        for role, tag in list(roles.scalars.items()):
            series = data.scalars[tag]
            if role == "step_time_s":
                if signals.step_time_ms is None:
                    signals.step_time_ms = ScalarSeries(
                        series.steps, series.wall_times, series.values * MS_PER_SECOND
                    )
                    roles.scalars["step_time_ms"] = tag
                continue
            setattr(signals, role, series)
        per_param = {
            "param_grad_norm": signals.param_grad_norms,
            "param_weight_norm": signals.param_weight_norms,
            "param_update_ratio": signals.param_update_ratios,
        }
        for role, by_param in roles.per_parameter.items():
            for param, tag in by_param.items():
                per_param[role][param] = data.scalars[tag]
        hist = {"grad_histogram": signals.grad_histograms, "weight_histogram": signals.weight_histograms}
        for role, by_param in roles.histograms.items():
            for param, tag in by_param.items():
                hist[role][param] = data.histograms[tag]
        return signals
