"""Run names that try to disguise themselves, in the Health tab (real TensorBoard, real headless
Chromium): a right-to-left override must not make `rtl\\u202egnp.exe` read `rtlexe.png`, and
control characters must not vanish from the name a user reads."""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser import HealthTab, browser_page, chromium_path
from tests.eventlogs import write_scalars
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)"),
]

DISGUISED = "rtl\u202egnp.exe"
SHOWN = "rtl[U+202E]gnp.exe"


def test_a_bidi_override_in_a_run_name_is_shown_not_obeyed(tmp_path):
    steps = np.arange(200)
    loss = 2.0 * np.exp(-steps / 80.0) + 0.5
    write_scalars(tmp_path / DISGUISED, {"train/loss": (steps, loss)})
    write_scalars(tmp_path / "plain", {"train/loss": (steps, loss)})
    with running_tensorboard(tmp_path) as base, browser_page() as page:
        runs = get_json(base + "/data/plugin/health/runs", timeout=120)["runs"]
        assert DISGUISED in {r["run"] for r in runs}  # the route keeps the raw name
        tab = HealthTab(page, base).open()
        tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length === 2")
        link = tab.eval(
            "(w, run) => { const a = w.document.querySelector(`tr.run-row[data-run='${run}'] a.run-link`);"
            " return {text: a.textContent, title: a.title}; }",
            DISGUISED,
        )
        assert link == {"text": SHOWN, "title": SHOWN}
        tab.frame.locator(f"tr.run-row[data-run='{DISGUISED}'] a.run-link").click()  # the raw name still routes
        title = tab.wait_until("w => w.document.querySelector('.run-title')?.textContent")
        assert title == SHOWN
        options = tab.eval("w => [...w.document.querySelectorAll('.run-menu option')].map(o => [o.value, o.textContent])")
        assert [DISGUISED, SHOWN] in options
        tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`)?.dataset.state === 'ready'")
