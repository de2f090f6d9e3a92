"""The finding and report shapes the CLI and the plugin share (`http_api.md`, `report`).

Detectors return `Finding`s; `run_report` turns a run's findings into the contract's JSON
object. Evidence may hold NaN/Inf: `json_safe` replaces them so the JSON stays strict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tb_health_plugin.contract import SEVERITY_RANK, worst_status


@dataclass
class Finding:
    kind: str
    severity: str
    step: int
    tag: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    end_step: int | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "severity": self.severity,
            "step": int(self.step),
            "tag": self.tag,
            "message": self.message,
            "evidence": json_safe(self.evidence),
        }
        if self.end_step is not None:
            out["end_step"] = int(self.end_step)
        return out


def json_safe(value: Any) -> Any:
    """Convert numpy scalars/arrays to Python and non-finite floats to strings ("nan", "inf")."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        if math.isfinite(f):
            return f
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def run_status(findings: list[Finding], has_data: bool) -> str:
    return worst_status((f.severity for f in findings), has_data)


def run_report(run: str, findings: list[Finding], step_range: tuple[int, int] | None) -> dict[str, Any]:
    """The contract's per-run object, findings ordered by step then severity."""
    ordered = sorted(findings, key=lambda f: (f.step, -SEVERITY_RANK[f.severity], f.kind))
    return {
        "run": run,
        "status": run_status(findings, step_range is not None),
        "steps": {"first": step_range[0], "last": step_range[1]} if step_range else None,
        "findings": [f.to_json() for f in ordered],
    }
