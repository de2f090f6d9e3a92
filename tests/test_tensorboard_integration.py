"""A real `tensorboard` process lists the Health tab and serves its routes and module."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from tests.eventlogs import write_scalars
from tests.tensorboard_server import get_json, running_tensorboard


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb-logs")
    steps = np.arange(200)
    write_scalars(root / "run_a", {"train/loss": (steps, 2.0 / (1 + steps / 50.0))})
    write_scalars(root / "nested" / "run_b", {"lm-loss": (steps, np.linspace(3, 1, 200)), "learning-rate": (steps, np.full(200, 1e-4))})
    return root


@pytest.mark.parametrize("load_fast", [False, True], ids=["python-loader", "rust-data-server"])
def test_health_tab_is_listed_and_serves_runs(logdir, load_fast):
    with running_tensorboard(logdir, load_fast=load_fast) as base:
        listing = get_json(base + "/data/plugins_listing")
        assert "health" in listing, f"the health plugin is not installed in this environment: {sorted(listing)}"
        health = listing["health"]
        assert health["tab_name"] == "Health"
        assert health["enabled"] is True
        assert health["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/health/index.js"}

        runs = get_json(base + "/data/plugin/health/runs")["runs"]
        assert {r["run"]: r["signals"] for r in runs} == {
            "run_a": {"loss": "train/loss"},
            "nested/run_b": {"loss": "lm-loss", "lr": "learning-rate"},
        }
        # TensorBoard's own run names agree with ours.
        tb_runs = get_json(base + "/data/runs")
        assert sorted(tb_runs) == ["nested/run_b", "run_a"]

        with urllib.request.urlopen(base + "/data/plugin/health/index.js", timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/javascript")
            module = response.read().decode("utf-8")
        assert "export" in module and "render" in module
