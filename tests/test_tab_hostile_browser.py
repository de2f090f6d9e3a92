"""The Health tab over hostile logs, in a real TensorBoard and headless Chromium: a FIFO named like
an event file, a wall time of `inf` and two processes writing one run folder. Nothing blanks the
tab, and the two writers are said in the run's findings."""

from __future__ import annotations

import os

import pytest

from tests.browser import HealthTab, chromium, chromium_path, new_page
from tests.readers_fixtures import event, scalar_value, write_events, write_scalar_run
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")


def write_hostile_logs(root) -> None:
    steps = list(range(200))
    write_scalar_run(root / "good", {"loss": (steps, [1.0 / (1 + s) for s in steps])})
    os.mkfifo(root / "good" / "events.out.tfevents.1.x")
    write_events(root / "clock", [event(s, scalar_value("loss", 1.0 / (1 + s)), wall_time=float("inf") if s == 50 else None)
                                  for s in steps])
    for suffix, offset, value in ((".a", 0.0, 1.0), (".b", 0.5, 2.0)):
        write_events(root / "shared", [event(s, scalar_value("loss", value / (1 + s)), wall_time=1_767_000_000.0 + s + offset)
                                       for s in steps], suffix=suffix)


def test_the_tab_lists_every_run_and_says_when_two_processes_wrote_one(tmp_path):
    write_hostile_logs(tmp_path)
    with running_tensorboard(tmp_path) as base:
        get_json(base + "/data/plugin/health/runs", timeout=180)
        with chromium() as browser, new_page(browser) as page:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            tab = HealthTab(page, base).open()
            tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length === 3", timeout_s=120)
            runs = tab.eval("w => [...w.document.querySelectorAll('tr.run-row')].map(r => r.dataset.run)")
            assert sorted(runs) == ["clock", "good", "shared"]
            tab.frame.locator("tr.run-row", has=page.locator('a.run-link:text-is("shared")')).locator("a.run-link").click()
            tab.wait_until("w => [...w.document.querySelectorAll('.finding-kind')].some(k => k.textContent === 'several writers')",
                           timeout_s=60)
            messages = tab.eval("w => [...w.document.querySelectorAll('.finding-message')].map(m => m.textContent)")
            assert any("(writer 2)" in message for message in messages), messages
            tab.screenshot("two-writers")
            assert errors == []
