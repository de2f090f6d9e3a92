"""The Health tab's charts read like TensorBoard's Scalars tab, in real headless Chromium against a
real `tensorboard`: log/linear scales (log by default over two decades), smoothing with the raw
series kept faint, "ignore outliers", step/relative/wall-time x axes, and TensorBoard's dark theme
(checked on computed styles and canvas pixels, not only on the DOM).
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tests.browser import HealthTab, chromium, chromium_path, new_page
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)"),
]

STEPS = 300
PEAK_STEP = 200
PEAK = 1.5e15
JUMP_STEP = 150
WALL_START = 1_767_000_000.0
SECONDS_PER_STEP = 2.5


def write_run(run_dir, series: dict[str, tuple[np.ndarray, np.ndarray]], seconds_per_step: float = 1.0) -> None:
    run_dir.mkdir(parents=True)
    writer = EventFileWriter(str(run_dir))
    for tag, (steps, values) in series.items():
        for step, value in zip(steps.tolist(), values.tolist(), strict=True):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            writer.add_event(Event(wall_time=WALL_START + step * seconds_per_step, step=int(step), summary=summary))
    writer.close()


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    root = tmp_path_factory.mktemp("tab-chart-logs")
    steps = np.arange(STEPS)
    rng = np.random.default_rng(1)
    loss = 2.0 + 0.1 * rng.standard_normal(STEPS)
    loss[PEAK_STEP] = PEAK  # one overflowed step: on a linear axis the rest is a flat line at 0
    write_run(root / "peak", {"train/loss": (steps, loss)}, SECONDS_PER_STEP)
    dip = loss.copy()
    dip[PEAK_STEP] = -PEAK  # a reward-like signal: its longest tick label is '-1.5e+15'
    write_run(root / "dip", {"train/loss": (steps, dip)})
    jump = np.where(steps < JUMP_STEP, 0.0, 1.0)  # a unit step: the smoothed curve is known exactly
    write_run(root / "jump", {"train/loss": (steps, jump + 5.0)})
    with running_tensorboard(root) as base:
        get_json(base + "/data/plugin/health/runs", timeout=120)
        yield base


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


def open_run(tab: HealthTab, run: str) -> None:
    tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0")
    tab.frame.locator(f"tr.run-row[data-run='{run}'] a.run-link").click()
    tab.wait_until("w => w.document.body.dataset.chartsDrawnMs")
    loss_ready(tab)


def loss_ready(tab: HealthTab) -> dict:
    tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`)?.dataset.state === 'ready'")
    return tab.eval("w => ({...w.document.querySelector(`[data-chart='loss']`).dataset})")


def change_setting(tab: HealthTab, setting: str, value) -> dict:
    """Change one chart setting through its control and wait for the loss chart to redraw."""
    tab.eval("w => { w.document.querySelector(`[data-chart='loss']`).dataset.state = 'stale'; }")
    control = tab.frame.locator(f".run-view [data-setting='{setting}']")
    if isinstance(value, bool):
        control.set_checked(value)
    elif setting == "smoothing":
        control.fill(str(value))  # a range input: fill sets it and fires input + change
    else:
        control.select_option(value)
    return loss_ready(tab)


def tb_smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's Scalars smoothing (exponential moving average with debiasing), per point."""
    out, last = [], 0.0
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return np.array(out)


def hover_legend(tab: HealthTab, step: int) -> dict[str, str]:
    """Hover the loss chart at `step`; the legend's labels and values there."""
    data = tab.eval("w => ({...w.document.querySelector(`[data-chart='loss']`).dataset})")
    xmin, xmax = float(data["xmin"]), float(data["xmax"])
    box = tab.frame.locator("[data-chart='loss'] .u-over").bounding_box()
    tab.page.mouse.move(box["x"] + box["width"] * (step - xmin) / (xmax - xmin), box["y"] + box["height"] / 2)
    return tab.wait_until(
        """w => {
          const rows = [...w.document.querySelectorAll(`[data-chart='loss'] .u-legend .u-series`)];
          const read = Object.fromEntries(rows.map(r => [r.querySelector('.u-label')?.textContent, r.querySelector('.u-value')?.textContent]));
          return Object.values(read).every(v => v && v !== '—') && read;
        }""",
        timeout_s=5,
    )


def axis_ink_columns(tab: HealthTab) -> tuple[int, int]:
    """(first, last) canvas column with axis-label ink left of the plot area."""
    return tab.eval(
        """w => {
          const canvas = w.document.querySelector(`[data-chart='loss'] canvas`);
          const over = w.document.querySelector(`[data-chart='loss'] .u-over`);
          const ratio = canvas.width / canvas.getBoundingClientRect().width;
          const plotLeft = Math.floor((over.getBoundingClientRect().left - canvas.getBoundingClientRect().left) * ratio);
          const pixels = canvas.getContext('2d').getImageData(0, 0, plotLeft, canvas.height).data;
          let first = -1, last = -1;
          for (let x = 0; x < plotLeft; x++) {
            for (let y = 0; y < canvas.height; y++) {
              if (pixels[(y * plotLeft + x) * 4 + 3] > 40) { if (first < 0) first = x; last = x; break; }
            }
          }
          return [first, last];
        }"""
    )


def test_a_huge_peak_gets_a_log_axis_whose_labels_fit_and_linear_with_outliers_ignored(tensorboard, browser):
    with new_page(browser) as page:
        tab = HealthTab(page, tensorboard).open()
        open_run(tab, "peak")
        loss = loss_ready(tab)
        assert loss["scale"] == "log"  # the series spans 15 decades: log by default
        first, _ = axis_ink_columns(tab)
        assert first > 0, "a y-axis label touches the canvas edge: it is clipped"
        # linear, as asked: the peak sets the scale ...
        loss = change_setting(tab, "yScale", "linear")
        assert loss["scale"] == "linear"
        assert float(loss["ymax"]) >= PEAK
        first, _ = axis_ink_columns(tab)
        assert first > 0, "the '1.5e+15' label is clipped"
        # ... unless outliers are ignored in the chart scaling: then the ordinary losses fill it
        loss = change_setting(tab, "ignoreOutliers", True)
        assert float(loss["ymax"]) < 10
        assert float(loss["max"]) == pytest.approx(PEAK, rel=1e-6)  # the data still holds the peak
        tab.screenshot("chart-linear-outliers-ignored")
        # the longest labels ('-1.5e+15') fit too
        tab.frame.locator("select.run-menu").select_option("dip")
        tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'dip'")
        change_setting(tab, "ignoreOutliers", False)
        first, _ = axis_ink_columns(tab)
        assert first >= 6, "the '-1.5e+15' label is clipped or touches the edge"
        tab.frame.locator("select.run-menu").select_option("peak")
        tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'peak'")
        change_setting(tab, "ignoreOutliers", True)
        # the choice is remembered (the reloaded tab comes back to the same run)
        tab.open()
        assert loss_ready(tab)["scale"] == "linear"
        assert tab.eval("w => w.document.querySelector(`[data-setting='yScale']`).value") == "linear"
        assert page.evaluate("() => true")


def test_smoothing_is_tensorboards_debiased_moving_average_over_the_faint_raw_series(tensorboard, browser):
    with new_page(browser) as page:
        tab = HealthTab(page, tensorboard).open()
        open_run(tab, "jump")
        values = np.where(np.arange(STEPS) < JUMP_STEP, 5.0, 6.0)
        for weight in (0.9, 0.6):
            change_setting(tab, "smoothing", weight)
            for step in (0, JUMP_STEP, JUMP_STEP + 3):
                legend = hover_legend(tab, step)
                shown = int(legend["Step"].replace(",", ""))
                expected = tb_smooth(values, weight)[shown]
                assert float(legend["smoothed"]) == pytest.approx(expected, rel=2e-3), (weight, shown)
                assert float(legend["mean"]) == values[shown]  # the raw value stays readable
        # the raw line is drawn faint behind the smoothed one
        strokes = tab.eval(
            """w => {
              const canvas = w.document.querySelector(`[data-chart='loss'] canvas`);
              const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
              const alphas = new Set();
              for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) alphas.add(Math.round(pixels[i] / 32));
              return alphas.size;
            }"""
        )
        assert strokes >= 3  # opaque smoothed line, faint raw line, fainter envelope
        change_setting(tab, "smoothing", 0)
        assert tab.eval(
            "w => [...w.document.querySelectorAll(`[data-chart='loss'] .u-legend .u-series`)].find(r => r.querySelector('.u-label').textContent === 'smoothed').classList.contains('u-off')"
        )


def test_relative_and_wall_time_axes(tensorboard, browser):
    with new_page(browser) as page:
        tab = HealthTab(page, tensorboard).open()
        open_run(tab, "peak")
        loss = change_setting(tab, "xAxis", "relative")
        # the run logs a step every 2.5 s: its last point is (STEPS - 1) * 2.5 s after the first
        assert float(loss["xmax"]) == pytest.approx((STEPS - 1) * SECONDS_PER_STEP, abs=1)
        legend = hover_legend(tab, 0)
        assert "Relative" in legend and legend["Relative"].endswith(("s", "min"))
        loss = change_setting(tab, "xAxis", "wall")
        assert float(loss["xmin"]) == pytest.approx(WALL_START, abs=1)
        assert ":" in hover_legend(tab, WALL_START + 10)["Wall time"]
        # zooming on a time axis still fetches the zoomed steps from the server
        box = tab.frame.locator("[data-chart='loss'] .u-over").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + 20)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 20, steps=5)
        page.mouse.up()
        zoom = tab.wait_until("w => w.document.querySelector('.run-view').dataset.zoom")
        start, end = (int(v) for v in zoom.split("-"))
        assert 0.15 * STEPS < start < end < 0.45 * STEPS  # in steps, mapped back from seconds
        loss = loss_ready(tab)
        assert int(loss["points"]) < STEPS
        change_setting(tab, "xAxis", "step")


def luminance(rgb: str) -> float:
    parts = [float(p) for p in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    return (0.2126 * parts[0] + 0.7152 * parts[1] + 0.0722 * parts[2]) / 255


def axis_text_luminance(tab: HealthTab) -> float:
    """Mean luminance of the opaque axis-label pixels left of the loss plot."""
    return tab.eval(
        """w => {
          const canvas = w.document.querySelector(`[data-chart='loss'] canvas`);
          const over = w.document.querySelector(`[data-chart='loss'] .u-over`);
          const ratio = canvas.width / canvas.getBoundingClientRect().width;
          const plotLeft = Math.floor((over.getBoundingClientRect().left - canvas.getBoundingClientRect().left) * ratio);
          const pixels = canvas.getContext('2d').getImageData(0, 0, plotLeft, canvas.height).data;
          let sum = 0, n = 0;
          for (let i = 0; i < pixels.length; i += 4) if (pixels[i + 3] > 200) { sum += 0.2126 * pixels[i] + 0.7152 * pixels[i + 1] + 0.0722 * pixels[i + 2]; n++; }
          return n ? sum / n / 255 : -1;
        }"""
    )


def card_background(tab: HealthTab) -> str:
    return tab.eval("w => w.getComputedStyle(w.document.querySelector(`[data-chart='loss']`)).backgroundColor")


def test_the_tab_follows_tensorboards_dark_mode_charts_included(tensorboard, browser):
    with new_page(browser, color_scheme="dark") as page:
        tab = HealthTab(page, tensorboard).open()
        page.wait_for_function("() => document.body.classList.contains('dark-mode')", timeout=30_000)
        open_run(tab, "peak")
        tab.wait_until("w => w.document.documentElement.dataset.theme === 'dark'")
        assert luminance(card_background(tab)) < 0.25
        assert luminance(tab.eval("w => w.getComputedStyle(w.document.body).backgroundColor")) < 0.2
        assert luminance(tab.eval("w => w.getComputedStyle(w.document.querySelector('.run-title')).color")) > 0.7
        assert axis_text_luminance(tab) > 0.55  # light tick labels on the dark card
        tab.screenshot("run-view-dark")
        # TensorBoard switched back to light: the tab follows without a reload, charts included
        page.evaluate("() => document.body.classList.remove('dark-mode')")
        tab.wait_until("w => w.document.documentElement.dataset.theme === 'light'")
        assert luminance(card_background(tab)) > 0.9
        tab.wait_until("w => true")
        assert 0 <= axis_text_luminance(tab) < 0.5


def test_opened_on_its_own_the_tab_follows_the_system_theme(tensorboard, browser):
    with new_page(browser, color_scheme="dark") as page:
        page.goto(f"{tensorboard}/data/plugin_entry.html?name=health", wait_until="domcontentloaded")
        page.wait_for_selector("#tb-health .topbar")
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        background = page.evaluate("() => getComputedStyle(document.querySelector('.topbar')).backgroundColor")
        assert luminance(background) < 0.25
    with new_page(browser, color_scheme="light") as page:
        page.goto(f"{tensorboard}/data/plugin_entry.html?name=health", wait_until="domcontentloaded")
        page.wait_for_selector("#tb-health .topbar")
        assert page.evaluate("() => document.documentElement.dataset.theme") == "light"


def test_the_compare_view_has_the_same_scales_and_axes(tensorboard, browser):
    with new_page(browser) as page:
        tab = HealthTab(page, tensorboard).open()
        tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0")
        for run in ("peak", "jump"):
            tab.frame.locator(f"tr.run-row[data-run='{run}'] input[type=checkbox]").check()
        tab.frame.locator("button.primary").click()
        ready = "w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.state === 'ready'"
        tab.wait_until(ready)
        card = "w => ({...w.document.querySelector(`[data-chart='compare-loss']`).dataset})"
        assert tab.eval(card)["scale"] == "log"  # one run's 1.5e15 peak: log by default here too
        tab.frame.locator(".compare-view [data-setting='ignoreOutliers']").set_checked(True)
        tab.frame.locator(".compare-view [data-setting='yScale']").select_option("linear")
        tab.wait_until("w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.scale === 'linear'")
        tab.wait_until(ready)
        assert float(tab.eval(card)["ymax"]) < 10  # the ordinary losses fill the chart
        tab.frame.locator(".compare-view [data-setting='xAxis']").select_option("relative")
        tab.wait_until("w => Number(w.document.querySelector(`[data-chart='compare-loss']`).dataset.xmax) > 700")
        # each run on its own clock: 'peak' logs a step every 2.5 s, 'jump' every second
        assert float(tab.eval(card)["xmax"]) == pytest.approx((STEPS - 1) * SECONDS_PER_STEP, abs=1)
        assert page.evaluate("() => true")
