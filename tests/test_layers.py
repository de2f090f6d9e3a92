"""The layers of pyproject.toml's `[tool.importlinter]` contracts hold (also run as `lint-imports`
by ./scripts/test): no import up a layer, the plugin never imports the hooks or the demo, the
hooks use only the contract and the analysis, no import cycle inside a package."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept(monkeypatch, capsys):
    cli = pytest.importorskip("importlinter.cli", reason="import-linter comes with the 'test' extra")
    monkeypatch.chdir(ROOT)
    status = cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert status == cli.EXIT_STATUS_SUCCESS, capsys.readouterr().out
