"""A link to one run (`#health&run=<run>`, as notifications and reports send it) opens the Health
tab on that run: real TensorBoard, real headless Chromium."""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest

from tests.browser import HealthTab, browser_page, chromium_path
from tests.eventlogs import write_scalars
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)"),
]


def test_a_link_to_a_run_opens_the_tab_on_that_run(tmp_path):
    steps = np.arange(200)
    loss = 2.0 * np.exp(-steps / 80.0) + 0.5
    for run in ("exp/rank_0", "exp/rank_1", "other"):
        write_scalars(tmp_path / run, {"train/loss": (steps, loss)})
    with running_tensorboard(tmp_path) as base, browser_page() as page:
        get_json(base + "/data/plugin/health/runs", timeout=120)
        page.goto(f"{base}/#health&run={urllib.parse.quote('exp/rank_1', safe='')}", wait_until="domcontentloaded")
        tab = HealthTab(page, base)
        tab.frame.locator("#tb-health .topbar").wait_for(timeout=60_000)
        title = tab.wait_until("w => w.document.querySelector('.run-title')?.textContent")
    assert title == "exp/rank_1"
