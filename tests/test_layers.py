"""The layers of pyproject.toml's `[tool.importlinter]` contracts hold (also run as `lint-imports`
by ./scripts/test): no import up a layer, the plugin never imports the hooks or the demo, the
hooks use only the contract and the analysis, no import cycle inside a package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept():
    """In a child process: import-linter reconfigures logging, which other tests rely on."""
    pytest.importorskip("importlinter.cli", reason="import-linter comes with the 'test' extra")
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
