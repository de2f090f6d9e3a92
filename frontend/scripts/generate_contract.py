"""Writes src/generated/contract.ts from tb_health_plugin/contract.py, so the tab's API types come
from the same module as the backend's (run by `npm run build`, `npm test`, `npm run typecheck`).

The contract depends only on the standard library, so it is loaded straight from its file: no
installed package, no virtual environment, any `python3` (3.8+) will do.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

FRONTEND = Path(__file__).resolve().parent.parent
CONTRACT = FRONTEND.parent / "tb_health_plugin" / "contract.py"
OUTPUT = FRONTEND / "src" / "generated" / "contract.ts"

# Each tuple of names becomes `export const NAME = [...] as const` and `export type Type = ...`.
UNIONS = (("SEVERITIES", "Severity"), ("STATUSES", "Status"), ("KINDS", "Kind"), ("CAUSES", "Cause"))


def load_contract(path: Path = CONTRACT):
    spec = importlib.util.spec_from_file_location("tb_health_contract", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def _strings(name: str, values: object) -> list[str]:
    if not isinstance(values, tuple) or not values or not all(isinstance(v, str) for v in values):
        raise TypeError(f"contract.{name} must be a non-empty tuple of strings, got {values!r}")
    return list(values)


def render(contract) -> str:
    version = contract.REPORT_VERSION
    if not isinstance(version, int):
        raise TypeError(f"contract.REPORT_VERSION must be an int, got {version!r}")
    lines = [
        "// Generated from tb_health_plugin/contract.py by scripts/generate_contract.py: do not edit.",
        "",
        f"export const REPORT_VERSION = {version} as const;",
        "",
    ]
    for name, type_name in UNIONS:
        values = _strings(name, getattr(contract, name))
        lines.append(f"export const {name} = {json.dumps(values)} as const;")
        lines.append(f"export type {type_name} = (typeof {name})[number];")
        lines.append("")
    rank = {s: contract.SEVERITY_RANK[s] for s in _strings("SEVERITIES", contract.SEVERITIES)}
    lines.append("/** Mildest first: a finding's severity as a number to compare. */")
    lines.append(f"export const SEVERITY_RANK: Readonly<Record<Severity, number>> = {json.dumps(rank)};")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else OUTPUT
    text = render(load_contract())
    # written only when it changed, so watchers and make-like tools see no spurious edit
    if not output.exists() or output.read_text(encoding="utf-8") != text:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
