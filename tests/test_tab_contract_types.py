"""The tab's API types are generated from `tb_health_plugin/contract.py` at build time
(`frontend/scripts/generate_contract.py`): every kind, severity, status and cause, and the
report version, reach the TypeScript side, and the generator needs no installed package."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tb_health_plugin import contract

SCRIPT = Path(__file__).resolve().parent.parent / "frontend" / "scripts" / "generate_contract.py"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_contract", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _union(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"export const {name} = "))
    body = line.split("=", 1)[1].split("as const")[0]
    return [item.strip().strip('"') for item in body.strip().strip("[]").split(",")]


def test_the_generated_module_carries_the_contract(tmp_path):
    out = tmp_path / "contract.ts"
    # -I -S: no site-packages, no PYTHONPATH; the contract is read from its file alone
    subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), str(out)], check=True, timeout=60)
    text = out.read_text(encoding="utf-8")
    assert f"export const REPORT_VERSION = {contract.REPORT_VERSION} as const;" in text
    assert _union(text, "KINDS") == list(contract.KINDS)
    assert _union(text, "SEVERITIES") == list(contract.SEVERITIES)
    assert _union(text, "STATUSES") == list(contract.STATUSES)
    assert _union(text, "CAUSES") == list(contract.CAUSES)
    for type_name, const in (("Kind", "KINDS"), ("Severity", "SEVERITIES"), ("Status", "STATUSES"), ("Cause", "CAUSES")):
        assert f"export type {type_name} = (typeof {const})[number];" in text
    assert '{"info": 0, "warning": 1, "critical": 2}' in text


def test_a_contract_the_types_cannot_express_stops_the_build():
    generator = _generator()
    broken = types.SimpleNamespace(**{name: getattr(contract, name) for name in dir(contract) if name.isupper()})
    broken.KINDS = ("nonfinite", 3)
    with pytest.raises(TypeError, match="KINDS"):
        generator.render(broken)
    broken.KINDS = contract.KINDS
    broken.REPORT_VERSION = "1"
    with pytest.raises(TypeError, match="REPORT_VERSION"):
        generator.render(broken)
