"""The README's screenshots: the Health tab on the demo's real trainings, in English and Chinese,
light and dark, from real headless Chromium against a real `tensorboard`
(`scripts/refresh-screenshots` copies them into docs/).

The demo trains its runs with MindSpore on the CPU (a few minutes); `TB_HEALTH_DEMO_LOGDIR`
points at logs an earlier `python -m tb_health_demo --no-serve` wrote, to reuse them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser import HealthTab, chromium, chromium_path, new_page
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.mindspore,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)"),
]

RUN = "corrupted_batch/rank_0"


@pytest.fixture(scope="module")
def demo_logdir(request):
    existing = os.environ.get("TB_HEALTH_DEMO_LOGDIR")
    if existing and (Path(existing) / "two_ranks").is_dir():
        return Path(existing)
    return request.getfixturevalue("demo_training").logdir


@pytest.fixture(scope="module")
def tensorboard(demo_logdir):
    with running_tensorboard(demo_logdir) as base:
        get_json(base + "/data/plugin/health/runs", timeout=300)
        yield base


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("language", ["en", "zh"])
def test_screenshots_of_the_demo(tensorboard, browser, language, theme):
    locale = "zh-CN" if language == "zh" else "en-US"
    with new_page(browser, locale=locale, color_scheme=theme) as page:
        tab = HealthTab(page, tensorboard).open()
        tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length >= 7")
        assert tab.eval("w => w.document.documentElement.dataset.theme") == theme
        assert tab.eval("w => w.document.documentElement.lang") == ("zh-CN" if language == "zh" else "en")
        statuses = tab.eval("w => Object.fromEntries([...w.document.querySelectorAll('tr.run-row')].map(r => [r.dataset.run, r.dataset.status]))")
        assert statuses["deep_sigmoid/rank_0"] == "critical" and statuses["healthy_transformer/rank_0"] == "healthy"
        tab.screenshot(f"demo-overview-{language}-{theme}")
        tab.frame.locator(f"tr.run-row[data-run='{RUN}'] a.run-link").click()
        tab.wait_until("w => w.document.body.dataset.chartsDrawnMs")
        tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
        tab.wait_until("w => w.document.querySelectorAll('li.finding').length > 0")
        text = tab.eval("w => w.document.querySelector('.findings-pane').innerText")
        assert ("尖峰" if language == "zh" else "spike") in text
        tab.screenshot(f"demo-run-view-{language}-{theme}")
