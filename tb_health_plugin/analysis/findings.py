"""The report shape the CLI and the plugin share (`http_api.md`, `report`), before its text.

`run_report` orders a run's `Event`s into the contract's per-run object; the message catalogue
(`tb_health_plugin/i18n`) writes each event as a finding in one language. Evidence may hold
NaN/Inf: `json_safe` replaces them so the JSON stays strict.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tb_health_plugin.analysis.event import Event
from tb_health_plugin.contract import SEVERITY_RANK, worst_status


def json_safe(value: Any, nonfinite_as_null: bool = False) -> Any:
    """Convert numpy scalars/arrays to Python and non-finite floats to strings ("nan", "inf"),
    or to None with `nonfinite_as_null` (chart data, where a missing value is a gap)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v, nonfinite_as_null) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, nonfinite_as_null) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v, nonfinite_as_null) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        if math.isfinite(f):
            return f
        if nonfinite_as_null:
            return None
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def run_status(findings: list[Event], has_data: bool) -> str:
    return worst_status((f.severity for f in findings), has_data)


def run_report(run: str, findings: list[Event], step_range: tuple[int, int] | None) -> dict[str, Any]:
    """The contract's per-run object, its events ordered by step then severity (not yet text)."""
    ordered = sorted(findings, key=lambda f: (f.step, -SEVERITY_RANK[f.severity], f.kind))
    return {
        "run": run,
        "status": run_status(findings, step_range is not None),
        "steps": {"first": step_range[0], "last": step_range[1]} if step_range else None,
        "findings": ordered,
    }
