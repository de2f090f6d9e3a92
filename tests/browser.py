"""Headless Chromium for the tab's tests and benchmark, driven by Playwright's Python package.

Uses the system Chromium (never a downloaded browser). The tab lives in TensorBoard's plugin
iframe; `HealthTab` reads and drives it through `frame_locator`, and evaluates scripts inside it
through the iframe's `contentWindow` (`page.frames` may not list the plugin frame).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
IFRAME = 'iframe[src*="plugin_entry.html?name=health"]'


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def chromium() -> Iterator:
    """A headless Chromium (Playwright `Browser`); it always closes."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def new_page(
    browser, locale: str = "en-US", width: int = 1500, height: int = 950, color_scheme: str = "light"
) -> Iterator:
    """A page in a fresh browser context (own storage, language, viewport and system theme)."""
    context = browser.new_context(locale=locale, viewport={"width": width, "height": height}, color_scheme=color_scheme)
    try:
        yield context.new_page()
    finally:
        context.close()


@contextlib.contextmanager
def browser_page(locale: str = "en-US", width: int = 1500, height: int = 950) -> Iterator:
    """A fresh page in a fresh headless Chromium; the browser always closes."""
    with chromium() as browser, new_page(browser, locale, width, height) as page:
        yield page


class HealthTab:
    """The Health tab of a TensorBoard opened in `page`."""

    def __init__(self, page, base_url: str) -> None:
        self.page = page
        self.base_url = base_url
        self.frame = page.frame_locator(IFRAME)

    def open(self, timeout_ms: int = 60_000) -> HealthTab:
        """Load (or reload: a hash-only `goto` would not) TensorBoard on the Health tab."""
        if self.page.url.startswith(self.base_url):
            self.page.reload(wait_until="domcontentloaded")
        else:
            self.page.goto(f"{self.base_url}/#health", wait_until="domcontentloaded")
        self.page.wait_for_selector(IFRAME, state="attached", timeout=timeout_ms)
        self.frame.locator("#tb-health .topbar").wait_for(timeout=timeout_ms)
        return self

    def eval(self, script: str, arg=None):
        """Evaluate `script` (a JS function of (window, arg)) inside the plugin iframe."""
        return self.page.evaluate(
            f"([selector, arg]) => {{ const w = document.querySelector(selector).contentWindow; return ({script})(w, arg); }}",
            [IFRAME, arg],
        )

    def wait_until(self, script: str, arg=None, timeout_s: float = 30.0, interval_s: float = 0.1):
        """Poll `script` inside the iframe until it returns something truthy; return that value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(script, arg)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met in {timeout_s} s: {script}")
            time.sleep(interval_s)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path
