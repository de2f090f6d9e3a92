"""Joins findings across signals into a likely cause (filled in by the diagnosis work)."""

from __future__ import annotations

from tb_health_plugin.analysis.findings import Finding
from tb_health_plugin.analysis.signals import RunSignals


def explain(findings: list[Finding], signals: RunSignals) -> list[Finding]:
    return findings
