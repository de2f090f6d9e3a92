"""The Health tab in real headless Chromium against a real `tensorboard` process and real logs.

One TensorBoard and one browser serve the whole module (starting them costs most of the time);
each test opens the tab afresh. Screenshots go to `test-artifacts/`.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter

from tests.browser import HealthTab, chromium, chromium_path, new_page
from tests.eventlogs import WALL_TIME_START, write_scalars
from tests.tensorboard_server import get_json, running_tensorboard

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)"),
]

XSS_RUN = "<img src=x onerror=alert(1)>"
XSS_TAG = "<b>bold</b>.layers.1.w"
STEPS = 3000
SPIKE_STEP = 1500
LAYERS = 8
LONG_LAYERS = [
    "model.backbone.embedding.word_embeddings.embedding_table",
    "model.backbone.encoder.layers.11.self_attention.query_key_value.weight",
]


def write_logs(root) -> None:
    steps = np.arange(STEPS)
    rng = np.random.default_rng(0)
    loss = 3.0 * np.exp(-steps / 800.0) + 0.5 + rng.normal(0, 0.02, STEPS)
    spiky = loss.copy()
    spiky[SPIKE_STEP] = 40.0
    per_layer = {
        f"grad_norm/model.layers.{i}.attention.wq.weight": (steps[::5], 10.0 ** (i - LAYERS) * (1 + rng.random(STEPS // 5)))
        for i in range(LAYERS)
    }
    write_scalars(
        root / "spiky",
        {
            "train/loss": (steps, spiky),
            "train/lr": (steps, np.minimum(1e-3, (steps + 1) * 1e-6)),
            "train/grad_norm": (steps, 10.0 ** rng.uniform(-1, 2, STEPS)),  # decades: a log axis
            "train/throughput": (steps, 900 + rng.normal(0, 5, STEPS)),
            **per_layer,
        },
    )
    step_ms = 100 + rng.normal(0, 1, STEPS)
    write_scalars(
        root / "exp" / "rank_0",
        {"train/loss": (steps, loss), "train/lr": (steps, np.full(STEPS, 1e-3)), "train/step_time_ms": (steps, step_ms)},
    )
    write_scalars(root / "exp" / "rank_1", {"train/loss": (steps, loss * 1.02), "train/step_time_ms": (steps, step_ms[::-1])})
    write_scalars(root / "growing", {"train/loss": (steps[:1000], loss[:1000])})
    write_scalars(root / XSS_RUN, {"loss": (steps, loss), f"grad_norm/{XSS_TAG}": (steps, np.ones(STEPS))})
    dead = np.zeros(200)  # dead gradients: exact zeros, off any log scale
    write_scalars(
        root / "dead",
        {"train/loss": (steps[:200], np.ones(200)), "train/grad_norm": (steps[:200], dead), "grad_norm/layers.0.w": (steps[:200], dead)},
    )
    write_scalars(root / "single", {"loss": ([5], [1.0]), "lr": ([5], [0.1])})
    write_mindspore_summary(root / "ms_run", steps[:200], loss[:200])
    write_scalars(
        root / "longnames",
        {
            "loss": (steps[:100], loss[:100]),
            f"grad_norm/{LONG_LAYERS[0]}": (steps[:100], np.full(100, 0.5)),
            f"grad_norm/{LONG_LAYERS[1]}": (steps[:100], np.full(100, 2.0)),
        },
    )
    # As our hooks log it: the loss every 10 steps, and the window maximum that holds the one
    # step in between whose loss jumped.
    window_max = loss[9::10] * 1.05
    window_max[SPIKE_STEP // 10] = 40.0
    write_scalars(root / "windowed", {"train/loss": (steps[9::10], loss[9::10]), "train/loss_max": (steps[9::10], window_max)})


def write_mindspore_summary(run_dir, steps, losses) -> None:
    """A MindSpore summary file (`SummaryRecord`'s name and framing; `loss/auto` as SummaryCollector tags it)."""
    from tb_health_plugin.readers.schema import MsEvent
    from tb_health_plugin.tfrecord import masked_crc

    def frame(payload: bytes) -> bytes:
        header = len(payload).to_bytes(8, "little")
        return header + masked_crc(header).to_bytes(4, "little") + payload + masked_crc(payload).to_bytes(4, "little")

    events = [MsEvent(wall_time=WALL_TIME_START, version="MindSpore.Event:1")]
    for step, value in zip(steps.tolist(), losses.tolist(), strict=True):
        event = MsEvent(wall_time=WALL_TIME_START + step, step=step)
        event.summary.value.add(tag="loss/auto").scalar_value = value
        events.append(event)
    run_dir.mkdir(parents=True)
    (run_dir / "events.out.events.summary.1767000000.0.host_MS").write_bytes(b"".join(frame(e.SerializeToString()) for e in events))


def append_scalars(run_dir, tag: str, steps, values) -> None:
    """Append events to the run's existing event file, as a training process keeps doing."""
    (path,) = sorted(run_dir.glob("events.out.tfevents.*"))
    with open(path, "ab") as stream:
        writer = RecordWriter(stream)
        for step, value in zip(steps, values, strict=True):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
            event = Event(wall_time=WALL_TIME_START + int(step), step=int(step), summary=summary)
            writer.write(event.SerializeToString())
        writer.flush()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tab-logs")
    write_logs(root)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir):
    with running_tensorboard(logdir) as base:
        get_json(base + "/data/plugin/health/runs", timeout=120)  # warm the analysis cache
        yield base


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture()
def page(browser):
    with new_page(browser) as page:
        dialogs: list[str] = []
        errors: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.dialogs, page.errors = dialogs, errors
        yield page


def overview_runs(tab: HealthTab) -> list[str]:
    # the first answer may list runs still being read or analysed (pending): wait for their verdicts
    tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0 &&"
                   " !w.document.querySelector(`tr.run-row[data-status='pending']`)", timeout_s=300)
    return tab.eval("w => [...w.document.querySelectorAll('tr.run-row')].map(r => r.dataset.run)")


def open_run(tab: HealthTab, run: str) -> None:
    tab.frame.locator("tr.run-row", has=tab.page.locator(f'a.run-link:text-is("{run}")')).locator("a.run-link").click()
    tab.wait_until("w => w.document.body.dataset.chartsDrawnMs")


def chart(tab: HealthTab, name: str) -> dict:
    return tab.eval("(w, name) => ({...w.document.querySelector(`[data-chart='${name}']`).dataset})", name)


def test_overview_lists_every_run_as_tensorboard_names_it(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    runs = overview_runs(tab)
    # every run TensorBoard lists, plus the MindSpore summary run its own reader cannot see
    assert sorted(runs) == sorted([*get_json(tensorboard + "/data/runs"), "ms_run"])
    assert XSS_RUN in runs
    job = tab.eval("w => w.document.querySelector('tr.job-row').dataset.job")
    assert job == "exp"
    chips = tab.eval(
        "w => [...w.document.querySelectorAll(`tr.run-row[data-run='spiky'] .chip`)].map(c => c.textContent)"
    )
    assert {"loss", "learning rate", "gradient norm", "throughput"} <= set(chips)
    status = tab.eval("w => w.document.querySelector(`tr.run-row[data-run='spiky']`).dataset.status")
    assert status in {"warning", "critical"}
    tab.screenshot("overview")


# Records every <img> or <b> element added to the tab's document, so that one inserted and removed
# again, or inserted late, is seen without waiting for it.
WATCH_INJECTED_ELEMENTS = """w => {
  w.injectedElements = [];
  new w.MutationObserver((mutations) => {
    for (const m of mutations) for (const node of m.addedNodes) {
      if (node.nodeType === 1 && (node.matches('img, b') || node.querySelector('img, b'))) w.injectedElements.push(node.outerHTML);
    }
  }).observe(w.document, {subtree: true, childList: true});
}"""


def test_run_names_are_text_never_html(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    tab.eval(WATCH_INJECTED_ELEMENTS)
    overview_runs(tab)
    link_text = tab.eval(
        "(w, run) => [...w.document.querySelectorAll('a.run-link')].find(a => a.textContent === run)?.textContent", XSS_RUN
    )
    assert link_text == XSS_RUN
    open_run(tab, XSS_RUN)
    assert tab.eval("w => w.document.querySelector('.run-title').textContent") == XSS_RUN
    assert XSS_RUN in tab.eval("w => [...w.document.querySelectorAll('.run-menu option')].map(o => o.textContent)")
    tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
    box = tab.frame.locator("[data-chart='heatmap'] .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = tab.wait_until("w => w.document.querySelector('.heatmap-hover').textContent")
    assert hover.startswith(XSS_TAG)  # the tag's parameter name, as text
    assert tab.eval("w => w.document.querySelectorAll('img, b').length") == 0
    # the header's run menu switches runs without going back to the overview
    tab.frame.locator("select.run-menu").select_option("exp/rank_1")
    tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'exp/rank_1'")
    tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`)?.dataset.state === 'ready'")
    assert page.dialogs == []
    assert tab.eval("w => w.injectedElements") == []  # none at any moment of the whole session
    assert page.errors == []


def test_run_view_draws_every_chart_and_the_heatmap(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "spiky")
    tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
    for name in ("loss", "lr", "grad_norm", "throughput"):
        assert chart(tab, name)["state"] == "ready", name
    assert chart(tab, "loss_scale")["state"] == "empty"
    assert float(chart(tab, "loss")["max"]) == 40.0  # the one-step spike survives downsampling
    heatmap = chart(tab, "heatmap")
    assert int(heatmap["layers"]) == LAYERS
    # The heatmap canvas is painted with many distinct colours (one per depth decade).
    colours = tab.eval(
        """w => {
          const canvas = w.document.querySelector(`[data-chart='heatmap'] canvas`);
          const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
          const seen = new Set();
          for (let i = 0; i < pixels.length; i += 4 * 97) if (pixels[i + 3] > 0) seen.add(pixels[i] + ',' + pixels[i + 1] + ',' + pixels[i + 2]);
          return seen.size;
        }"""
    )
    assert colours >= LAYERS
    # One cursor: hovering the loss chart moves the cursor of the learning-rate chart.
    box = tab.frame.locator("[data-chart='loss'] .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    tab.wait_until("w => w.document.querySelector(`[data-chart='lr'] .u-legend .u-value`)?.textContent !== '—'", timeout_s=5)
    assert page.errors == []
    tab.screenshot("run-view")


def test_the_loss_chart_shows_the_window_maximum_between_logged_points(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "windowed")
    tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`)?.dataset.state === 'ready'")
    assert float(chart(tab, "loss")["max"]) == 40.0  # from train/loss_max: the logged loss never exceeds 3.5
    legend = tab.eval("w => [...w.document.querySelectorAll(`[data-chart='loss'] .u-legend .u-label`)].map(l => l.textContent)")
    assert "window max" in legend
    # hovering the spike's step reads it off the window-maximum line
    box = tab.frame.locator("[data-chart='loss'] .u-over").bounding_box()
    xmin, xmax = int(chart(tab, "loss")["xmin"]), int(chart(tab, "loss")["xmax"])
    spike_at = SPIKE_STEP // 10 * 10 + 9
    page.mouse.move(box["x"] + box["width"] * (spike_at - xmin) / (xmax - xmin), box["y"] + box["height"] / 2)
    read = tab.wait_until(
        """w => {
          const rows = [...w.document.querySelectorAll(`[data-chart='loss'] .u-legend .u-series`)];
          const row = rows.find(r => r.querySelector('.u-label')?.textContent === 'window max');
          const value = row?.querySelector('.u-value')?.textContent;
          return value && value !== '—' && value;
        }""",
        timeout_s=5,
    )
    assert float(read) == 40.0
    assert page.errors == []
    tab.screenshot("window-max")


def test_clicking_a_finding_zooms_every_chart_to_it(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "spiky")
    steps = tab.wait_until(
        "w => [...w.document.querySelectorAll('li.finding')].map(f => [f.dataset.kind, Number(f.dataset.step)])"
    )
    spikes = [step for kind, step in steps if kind == "loss_spike"]
    assert any(abs(step - SPIKE_STEP) <= 2 for step in spikes)
    tab.frame.locator(f"li.finding[data-kind='loss_spike'][data-step='{spikes[0]}']").click()
    tab.wait_until("w => w.document.querySelector('.run-view').dataset.zoom")
    tab.wait_until("w => [...w.document.querySelectorAll('.run-view [data-chart]:not([data-state=empty])')].every(c => c.dataset.state === 'ready')")
    for name in ("loss", "lr", "grad_norm", "throughput", "heatmap"):
        xmin, xmax = int(chart(tab, name)["xmin"]), int(chart(tab, name)["xmax"])
        assert xmin <= spikes[0] <= xmax, name
        assert xmax - xmin < STEPS / 4, name
    # the zoomed data came from the server again, from the full data: the spike is still there
    assert float(chart(tab, "loss")["max"]) == 40.0
    assert tab.eval("w => w.document.querySelector('li.finding.active').dataset.kind") == "loss_spike"
    assert page.errors == []
    tab.screenshot("finding-zoom")
    tab.frame.get_by_role("button", name="Reset zoom").click()
    tab.wait_until("w => !w.document.querySelector('.run-view').dataset.zoom")
    assert int(chart(tab, "loss")["xmax"]) - int(chart(tab, "loss")["xmin"]) >= STEPS - 2


def test_a_run_appended_to_while_open_updates_and_keeps_selection_and_zoom(tensorboard, page, logdir):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    tab.frame.locator("tr.run-row[data-run='exp/rank_0'] input[type=checkbox]").check()
    open_run(tab, "growing")
    assert chart(tab, "loss")["xmax"] == "999"
    append_scalars(logdir / "growing", "train/loss", range(1000, 2000), [1.0] * 1000)
    tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`).dataset.xmax === '1999'", timeout_s=40)
    assert "1,999" in tab.eval("w => w.document.querySelector('.run-header').textContent")
    # zoom by dragging across the middle of the loss chart, then let more steps arrive
    box = tab.frame.locator("[data-chart='loss'] .u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.up()
    zoom = tab.wait_until("w => w.document.querySelector('.run-view').dataset.zoom")
    xmin, xmax = chart(tab, "loss")["xmin"], chart(tab, "loss")["xmax"]
    assert 400 <= int(xmin) < int(xmax) <= 1100
    append_scalars(logdir / "growing", "train/loss", range(2000, 3000), [0.9] * 1000)
    tab.wait_until("w => w.document.querySelector('.run-header').textContent.includes('2,999')", timeout_s=40)
    tab.wait_until("w => w.document.querySelector(`[data-chart='loss']`).dataset.state === 'ready'")
    assert tab.eval("w => w.document.querySelector('.run-view').dataset.zoom") == zoom
    assert (chart(tab, "loss")["xmin"], chart(tab, "loss")["xmax"]) == (xmin, xmax)
    tab.frame.locator("button.tab[data-view='overview']").click()
    last_step = tab.eval("w => w.document.querySelector(`tr.run-row[data-run='growing'] td.num`).textContent")
    assert last_step == "2,999"
    assert tab.frame.locator("tr.run-row[data-run='exp/rank_0'] input[type=checkbox]").is_checked()


def test_overview_sorts_and_filters(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    tab.frame.locator("input.name-filter").fill("rank")
    assert overview_runs(tab) == ["exp/rank_0", "exp/rank_1"]
    tab.frame.locator("input.name-filter").fill("")
    top_level_last_steps = (
        "w => [...w.document.querySelectorAll('.runs-table tbody tr:not(.in-job)')]"
        ".map(r => Number(r.querySelector('td.num').textContent.replace(/,/g, '')))"
    )
    tab.frame.locator("th[data-sort='last_step']").click()  # descending first
    steps = tab.eval(top_level_last_steps)
    assert steps == sorted(steps, reverse=True) and len(steps) == 9  # 8 runs and the job
    tab.frame.locator("th[data-sort='last_step']").click()
    assert tab.eval(top_level_last_steps) == sorted(steps)
    tab.frame.locator("th[data-sort='status']").click()
    status = tab.eval("w => w.document.querySelector('tr.run-row').dataset.status")
    assert status == "critical" or status == "warning"
    spiky_status = tab.eval("w => w.document.querySelector(`tr.run-row[data-run='spiky']`).dataset.status")
    tab.frame.locator("select.input").first.select_option(spiky_status)
    assert "spiky" in overview_runs(tab)
    assert all(
        s == spiky_status for s in tab.eval("w => [...w.document.querySelectorAll('tr.run-row')].map(r => r.dataset.status)")
    )


def test_compare_shows_runs_side_by_side_and_marks_the_best(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    for run in ("exp/rank_0", "exp/rank_1"):
        tab.frame.locator(f"tr.run-row[data-run='{run}'] input[type=checkbox]").check()
    tab.frame.locator("button.primary").click()
    tab.wait_until("w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.state === 'ready'")
    rows = tab.eval("w => [...w.document.querySelectorAll('.compare-table tbody tr')].map(r => r.dataset.run)")
    assert rows == ["exp/rank_0", "exp/rank_1"]
    legend = tab.eval("w => [...w.document.querySelectorAll(`[data-chart='compare-loss'] .u-legend .u-label`)].map(l => l.textContent)")
    assert {"exp/rank_0", "exp/rank_1"} <= set(legend)
    best = tab.wait_until("w => w.document.querySelector('.compare-table tr.best-row')?.dataset.run")
    assert best == "exp/rank_0"  # rank_1 logs a 2% higher loss
    # add a run from the compare view's own picker
    tab.frame.locator(".run-picker button.pick[data-run='spiky']").click()
    tab.wait_until("w => w.document.querySelectorAll('.compare-table tbody tr').length === 3")
    tab.wait_until("w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.state === 'ready'")
    assert tab.eval("w => w.document.querySelector('.compare-table tr.best-row')?.dataset.run") == "exp/rank_0"
    assert page.errors == []
    tab.screenshot("compare")


def test_language_follows_the_browser_and_the_switch_is_remembered(tensorboard, browser):
    with new_page(browser, locale="zh-CN") as page:
        tab = HealthTab(page, tensorboard).open()
        overview_runs(tab)
        assert tab.eval("w => w.document.querySelector('.brand').textContent") == "训练健康"
        tab.frame.locator("button.lang[data-lang='en']").click()
        assert tab.eval("w => w.document.querySelector('.brand').textContent") == "Training health"
        assert tab.eval("w => w.localStorage.getItem('tb-health.lang')") == "en"
        tab.open()
        overview_runs(tab)
        assert tab.eval("w => w.document.querySelector('.brand').textContent") == "Training health"
        tab.frame.locator("button.lang[data-lang='zh']").click()
        header = tab.eval("w => w.document.querySelector('.runs-table thead').textContent")
        assert "运行" in header and "状态" in header
        tab.screenshot("overview-zh")
        open_run(tab, "spiky")
        texts = (
            "w => [w.document.querySelector(`[data-chart='loss'] .card-title`).textContent,"
            " w.document.querySelectorAll(`[data-chart='loss'] .u-legend .u-label`)[1].textContent,"
            " w.document.querySelector('.run-header .badge').textContent,"
            " w.document.querySelector('.run-header button').textContent]"
        )
        status = tab.eval("w => w.document.querySelector('.run-header .badge').className.match(/status-(\\w+)/)[1]")
        zh_status = {"critical": "严重", "warning": "警告", "healthy": "健康"}[status]
        assert tab.eval(texts) == ["损失", "均值", zh_status, "重置缩放"]
        # the findings speak Chinese too, as the server writes them (its figures included)
        spike = "w => w.document.querySelector(`li.finding[data-kind='loss_spike']`)?.innerText ?? ''"
        spike_zh = tab.wait_until(f"w => {{ const t = ({spike})(w); return t.includes('跳升') && t; }}")
        assert "损失尖峰" in spike_zh and "局部趋势" in spike_zh and "建议" in spike_zh
        assert "above its local trend" not in spike_zh
        report = "../../data/plugin/health/report?run=spiky&lang=zh"
        message = tab.eval(
            f"w => fetch('{report}').then(r => r.json()).then(r => r.runs[0].findings.find(f => f.kind === 'loss_spike').message)"
        )
        assert message in spike_zh
        tab.screenshot("run-view-zh")
        tab.frame.locator("button.lang[data-lang='en']").click()
        assert tab.eval(texts) == ["Loss", "mean", status, "Reset zoom"]
        # the message comes back from the server while the rest re-renders: wait for the whole finding
        spike_en = tab.wait_until(
            f"w => {{ const t = ({spike})(w); return t.includes('above its local trend') && !t.includes('损失') && t; }}"
        )
        assert "损失" not in spike_en and "Advice" in spike_en and "loss spike" in spike_en


FINDING_PARTS = (
    "w => { const f = w.document.querySelector(`li.finding[data-kind='loss_spike']`);"
    " return f && ['.badge', '.finding-kind', '.finding-message', '.finding-advice strong']"
    ".map(s => f.querySelector(s)?.textContent ?? ''); }"
)


def chinese(text: str) -> bool:
    return any("\u4e00" <= char <= "\u9fff" for char in text)


def test_a_finding_never_reads_in_two_languages_while_the_switch_is_under_way(tensorboard, browser):
    """A finding's message comes from `/report` and its kind's name from `/runs`, two answers that
    can arrive in either order after a switch: until both speak the new language, the finding
    stays whole in the old one. The `/runs` answers are held back to make the slow order sure."""
    with new_page(browser, locale="zh-CN") as page:
        tab = HealthTab(page, tensorboard).open()
        overview_runs(tab)
        open_run(tab, "spiky")
        zh_parts = tab.wait_until(f"w => {{ const p = ({FINDING_PARTS})(w); return p && p[2].includes('跳升') && p; }}")
        assert all(chinese(part) for part in zh_parts), zh_parts
        held = []

        def is_runs(url: str) -> bool:
            return "/data/plugin/health/runs?" in url

        def hold(route) -> None:
            held.append(route)

        page.route(is_runs, hold)
        try:
            with page.expect_response(lambda r: "/health/report?" in r.url and "lang=en" in r.url, timeout=30_000):
                tab.frame.locator("button.lang[data-lang='en']").click()
            for _ in range(10):  # the English report is in; the kinds' names are not
                parts = tab.eval(FINDING_PARTS)
                assert all(chinese(part) for part in parts), f"half switched before the kinds' names came: {parts}"
                time.sleep(0.1)
            assert held, "the switch asked for the runs in English"
            # choosing a finding meanwhile moves the highlight and keeps the list whole
            tab.frame.locator("li.finding[data-kind='loss_spike']").click()
            parts = tab.eval(FINDING_PARTS)
            assert all(chinese(part) for part in parts), f"half switched by a click: {parts}"
            assert tab.eval("w => w.document.querySelector(`li.finding[data-kind='loss_spike']`)"
                            ".classList.contains('active')")
        finally:
            for route in list(held):
                route.continue_()
            page.unroute(is_runs)  # lets any later one through too
        en_parts = tab.wait_until(
            f"w => {{ const p = ({FINDING_PARTS})(w); return p && p[2].includes('above its local trend') && p; }}"
        )
        assert not any(chinese(part) for part in en_parts), en_parts
        assert en_parts[1] == "loss spike" and en_parts[3].startswith("Advice")


def test_tensorboard_reload_button_refreshes_the_tab(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    with page.expect_request(lambda request: "/health/runs" in request.url, timeout=10_000):
        page.locator("button.reload-button").click()  # TensorBoard's own reload, outside the iframe
    assert tab.wait_until("w => w.document.body.dataset.hostReloads", timeout_s=10)


def test_page_fills_the_iframe(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    app_height, inner_height = tab.eval(
        "w => [w.document.querySelector('.health-app').getBoundingClientRect().height, w.innerHeight]"
    )
    assert inner_height > 300 and abs(app_height - inner_height) <= 1


def test_degenerate_runs_draw_without_errors(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "dead")
    tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
    assert "not drawn on this log scale" in tab.eval("w => w.document.querySelector(`[data-chart='grad_norm'] .card-note`).textContent")
    assert int(chart(tab, "heatmap")["zeroCells"]) > 0  # zero norms get their own colour
    tab.frame.locator("select.run-menu").select_option("single")
    tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'single'")
    for name in ("loss", "lr"):  # each chart loads on its own: wait for both
        tab.wait_until(f"w => w.document.querySelector(`[data-chart='{name}']`)?.dataset.state === 'ready'")
    assert page.errors == []


def test_polling_refresh_keeps_the_overview_scroll(tensorboard, browser):
    with new_page(browser, height=480) as page:
        tab = HealthTab(page, tensorboard).open()
        overview_runs(tab)
        scrolled = tab.eval("w => { const m = w.document.querySelector('.main'); m.scrollTop = 10000; return m.scrollTop; }")
        assert scrolled > 0, "the viewport should be small enough for the overview to scroll"
        with page.expect_request(lambda request: "/health/runs" in request.url, timeout=15_000):
            pass  # the tab's own 5 s poll
        # the refresh is drawn when its time is stamped: "0 s ago" (the last one was 5 s before)
        tab.wait_until("w => /(^|\\D)0(\\D|$)/.test(w.document.querySelector('.refresh-state').textContent)", timeout_s=15)
        assert tab.eval("w => w.document.querySelector('.main').scrollTop") == scrolled


def test_evidence_reads_as_labelled_figures_with_the_raw_json_behind_a_toggle(tensorboard, browser):
    with new_page(browser) as page:
        tab = HealthTab(page, tensorboard).open()
        overview_runs(tab)
        open_run(tab, "spiky")
        spike = "li.finding[data-kind='loss_spike']"
        tab.wait_until(f"w => !!w.document.querySelector(`{spike} .evidence dt`)")
        labels = tab.eval(f"w => [...w.document.querySelectorAll(`{spike} .evidence dt`)].map(d => d.textContent)")
        values = tab.eval(f"w => [...w.document.querySelectorAll(`{spike} .evidence dd`)].map(d => d.textContent)")
        assert labels and not any("_" in label for label in labels), labels
        assert "Peak step" in labels and "Ratio to the local trend" in labels
        assert not any(v in ("null", "true", "false") or v.startswith(("{", "[")) for v in values), values
        keys = tab.eval(f"w => [...w.document.querySelectorAll(`{spike} .evidence dt`)].map(d => d.dataset.key)")
        shown = dict(zip(keys, values, strict=True))
        assert shown["ratio_to_trend"].startswith("×") and shown["peak_step"].replace(",", "").isdigit()
        assert "related" not in keys and "cause_detail" not in keys
        # set as text, not as a debugger dump: proportional font, words never split
        style = tab.eval(
            f"w => {{ const s = w.getComputedStyle(w.document.querySelector(`{spike} .evidence dd`)); return [s.fontFamily, s.wordBreak]; }}"
        )
        assert "mono" not in style[0].lower() and style[1] != "break-all"
        # the cause sentence is said once, not once in the message and again below it
        text = tab.eval(f"w => w.document.querySelector(`{spike}`).innerText")
        detail = tab.eval(
            "w => fetch('../../data/plugin/health/report?run=spiky').then(r => r.json()).then(r => r.runs[0].findings.find(f => f.kind === 'loss_spike').evidence.cause_detail || '')"
        )
        if detail:
            assert text.lower().count(detail.lower()[:40]) <= 1
        # the raw JSON is one click away, closed at first
        assert not tab.eval(f"w => w.document.querySelector(`{spike} details.evidence-raw`).open")
        tab.frame.locator(f"{spike} details.evidence-raw summary").click()
        raw = tab.eval(f"w => w.document.querySelector(`{spike} details.evidence-raw pre`).textContent")
        assert '"peak_step"' in raw
        # in Chinese every label is Chinese
        tab.frame.locator("button.lang[data-lang='zh']").click()
        labels_zh = tab.eval(f"w => [...w.document.querySelectorAll(`{spike} .evidence dt`)].map(d => d.textContent)")
        assert all(any("\u4e00" <= ch <= "\u9fff" for ch in label) for label in labels_zh), labels_zh
        tab.screenshot("evidence")


STATUS_RANK = {"no_data": 0, "pending": 0, "healthy": 1, "warning": 2, "critical": 3}


def test_overview_reads_at_a_glance(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    # worst first, then the most recently updated: top-level rows (jobs and runs outside jobs)
    rows = tab.eval(
        "w => [...w.document.querySelectorAll('tr.job-row, tr.run-row:not(.in-job)')].map(r => [r.dataset.status, Number(r.dataset.updated || -1)])"
    )
    keys = [(-STATUS_RANK[status], -updated) for status, updated in rows]
    assert keys == sorted(keys), rows
    # the count pills stay on one line
    tops = tab.eval(
        "w => [...w.document.querySelectorAll('td.counts')].map(c => new Set([...c.children].map(p => Math.round(p.getBoundingClientRect().top))).size)"
    )
    assert tops and max(tops) == 1
    # a run's series are not repeated on every row: they show on hover
    spiky = "tr.run-row[data-run='spiky']"
    display = f"w => w.getComputedStyle(w.document.querySelector(`{spiky} .row-signals`)).display"
    assert tab.eval(display) == "none"
    tab.frame.locator(f"{spiky} a.run-link").hover()
    assert tab.eval(display) == "flex"
    # the worst finding: two lines, and all of it in a TensorBoard-style tooltip on hover
    runs = get_json(tensorboard + "/data/plugin/health/runs")["runs"]
    worst = next(r for r in runs if r["run"] == "spiky")["worst"]["message"]
    tab.frame.locator(f"{spiky} .worst-message").hover()
    tip = tab.wait_until("w => { const t = w.document.querySelector('.tb-tooltip'); return t && !t.hidden && t.textContent; }")
    assert tip == worst
    background = tab.eval("w => w.getComputedStyle(w.document.querySelector('.tb-tooltip')).backgroundColor")
    assert background.startswith("rgba(97, 97, 97")  # TensorBoard's (Material) tooltip grey
    assert page.errors == []


def test_compare_shows_nothing_empty_before_two_runs_are_chosen(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    tab.frame.locator("button.tab[data-view='compare']").click()
    tab.wait_until("w => w.document.querySelector('.compare-view .muted')?.textContent")
    assert tab.eval("w => w.document.querySelector(`[data-chart='compare-loss']`).offsetParent") is None
    assert tab.eval("w => w.document.querySelector('.compare-table').offsetParent") is None
    for run in ("spiky", "exp/rank_0"):
        tab.frame.locator(f".run-picker button.pick[data-run='{run}']").click()
    tab.wait_until("w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.state === 'ready'")
    pills = tab.eval("w => [...w.document.querySelectorAll('.compare-table .count')].map(p => p.textContent)")
    assert "0" not in pills  # zero counts are left out, as in the overview


def glyph_images(tab: HealthTab, texts: list[str]) -> list:
    """Each text rendered in the tab's own font (as the brand title), screenshotted by Chromium."""
    from io import BytesIO

    from PIL import Image

    tab.eval(
        """(w, texts) => {
          const box = w.document.createElement('div');
          box.id = 'glyph-probe';
          box.style.cssText = 'position:fixed;left:0;top:0;z-index:999;background:#fff;color:#000;font-size:32px;padding:4px';
          for (const text of texts) { const s = w.document.createElement('span'); s.textContent = text; s.style.marginRight = '8px'; box.append(s); }
          w.document.body.append(box);
        }""",
        texts,
    )
    images = []
    for i in range(len(texts)):
        png = tab.frame.locator(f"#glyph-probe span:nth-child({i + 1})").screenshot()
        images.append(Image.open(BytesIO(png)).convert("L"))
    tab.eval("w => w.document.getElementById('glyph-probe').remove()")
    return images


def test_chinese_renders_with_real_glyphs_in_a_font_stack_for_every_system(tensorboard, browser):
    from PIL import ImageChops

    with new_page(browser, locale="zh-CN") as page:
        tab = HealthTab(page, tensorboard).open()
        overview_runs(tab)
        family = tab.eval("w => w.getComputedStyle(w.document.querySelector('.brand')).fontFamily")
        for face in ("Microsoft YaHei", "PingFang SC", "Noto Sans CJK SC"):  # Windows, macOS, Linux
            assert face in family
        # '\ue000' has no glyph in any font: it is drawn as the missing-glyph box (tofu)
        chars = ["训", "练", "健", "康", "\ue000"]
        images = glyph_images(tab, chars)
        tofu = images[-1]
        for char, image in zip(chars[:-1], images[:-1], strict=True):
            assert image.getextrema()[0] < 128, f"{char} left no ink"
            same_size = image.size == tofu.size
            assert not same_size or ImageChops.difference(image, tofu).getbbox() is not None, f"{char} is drawn as a box"
        # distinct characters give distinct glyphs (tofu boxes would all be the same)
        distinct = {image.tobytes() for image in images[:-1]}
        assert len(distinct) == len(chars) - 1
        # and the tab's own Chinese text: every string the overview shows is in Chinese
        job = tab.eval("w => w.document.querySelector('tr.job-row .run-cell').innerText")
        assert job == "作业 exp · 2 个进程"
        worst = tab.eval("w => [...w.document.querySelectorAll('.worst-message')].map(m => m.textContent)")
        assert worst and all(any("\u4e00" <= ch <= "\u9fff" for ch in message) for message in worst), worst
        assert not any("rank" in message for message in worst), worst  # no English word in the Chinese
        # the whole message, figures included, is in the tooltip, in Chinese as well
        tab.frame.locator(".worst-message").first.hover()
        tip = tab.wait_until("w => { const t = w.document.querySelector('.tb-tooltip'); return t && !t.hidden && t.textContent; }")
        assert tip == worst[0]


def test_step_time_sits_next_to_the_loss_with_the_jobs_other_ranks(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "exp/rank_0")
    tab.wait_until("w => w.document.querySelector(`[data-chart='throughput']`)?.dataset.state === 'ready'")
    pace = chart(tab, "throughput")
    assert pace["overlays"] == "1"  # rank_1's step time beside this rank's
    assert tab.eval("w => w.document.querySelector(`[data-chart='throughput'] .card-title`).textContent") == "Step time (ms)"
    legend = tab.eval("w => [...w.document.querySelectorAll(`[data-chart='throughput'] .u-legend .u-label`)].map(l => l.textContent)")
    assert "exp/rank_1" in legend
    tops = tab.eval(
        "w => ['loss', 'throughput'].map(id => Math.round(w.document.querySelector(`[data-chart='${id}']`).getBoundingClientRect().top))"
    )
    assert tops[0] == tops[1]  # one row: loss and step time side by side
    # a run outside any job: its step time alone, no rank lines
    tab.frame.locator("select.run-menu").select_option("spiky")
    tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'spiky'")
    tab.wait_until("w => w.document.querySelector(`[data-chart='throughput']`)?.dataset.state === 'ready'")
    assert chart(tab, "throughput")["overlays"] == "0"
    assert page.errors == []


def label_ink(tab: HealthTab) -> tuple[int, int]:
    """(first, last) heatmap canvas column with ink left of the cells: the layer names."""
    return tab.eval(
        """w => {
          const canvas = w.document.querySelector(`[data-chart='heatmap'] canvas`);
          const over = w.document.querySelector(`[data-chart='heatmap'] .u-over`);
          const ratio = canvas.width / canvas.getBoundingClientRect().width;
          const left = Math.floor((over.getBoundingClientRect().left - canvas.getBoundingClientRect().left) * ratio) - 2;
          const pixels = canvas.getContext('2d').getImageData(0, 0, left, canvas.height).data;
          let first = -1, last = -1;
          for (let x = 0; x < left; x++) for (let y = 0; y < canvas.height; y++) {
            if (pixels[(y * left + x) * 4 + 3] > 40) { if (first < 0) first = x; last = x; break; }
          }
          return [Math.round(first / ratio), Math.round(last / ratio)];
        }"""
    )


def test_heatmap_layer_names_fit_show_in_full_on_hover_and_their_column_resizes(tensorboard, page):
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    open_run(tab, "longnames")
    tab.wait_until("w => w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready'")
    first, last = label_ink(tab)
    assert first > 0, "a layer name is clipped at the left edge"
    width = int(chart(tab, "heatmap")["labelWidth"])
    # hovering a name shows it in full
    labels = tab.frame.locator("[data-chart='heatmap'] .heatmap-labels")
    box = labels.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.25)
    tip = tab.wait_until("w => { const t = w.document.querySelector('.tb-tooltip'); return t && !t.hidden && t.textContent; }")
    assert tip == LONG_LAYERS[0]
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.75)
    tab.wait_until("(w, name) => w.document.querySelector('.tb-tooltip').textContent === name", LONG_LAYERS[1])
    # drag the column edge wider: the names get more room
    handle = tab.frame.locator("[data-chart='heatmap'] .heatmap-label-handle").bounding_box()
    page.mouse.move(handle["x"] + handle["width"] / 2, handle["y"] + 10)
    page.mouse.down()
    page.mouse.move(handle["x"] + 150, handle["y"] + 10, steps=5)
    page.mouse.up()
    tab.wait_until("(w, before) => Number(w.document.querySelector(`[data-chart='heatmap']`).dataset.labelWidth) > before + 100", width)
    wider_first, wider_last = label_ink(tab)
    assert wider_first > 0 and wider_last - wider_first > last - first + 50
    assert page.errors == []


def test_runs_read_from_mindspore_summaries_suggest_tb_health_convert(tensorboard, logdir, page):
    runs = {r["run"]: r for r in get_json(tensorboard + "/data/plugin/health/runs")["runs"]}
    assert runs["ms_run"]["source"] == "mindspore" and runs["spiky"]["source"] == "tfevents"
    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    hint = tab.wait_until("w => { const h = w.document.querySelector('.overview .convert-hint'); return h && !h.hidden && h.innerText; }")
    assert f"tb-health convert {logdir}" in hint and "1 run(s)" in hint
    open_run(tab, "ms_run")
    assert "tb-health convert" in tab.eval("w => w.document.querySelector('.run-view .convert-hint').innerText")
    tab.frame.locator("select.run-menu").select_option("spiky")
    tab.wait_until("w => w.document.querySelector('.run-title').textContent === 'spiky'")
    assert tab.eval("w => w.document.querySelector('.run-view .convert-hint').hidden")


TB_PALETTE = ["#425066", "#12b5cb", "#e52592", "#f9ab00", "#9334e6", "#7cb342", "#e8710a"]


def hex_of(rgb: str) -> str:
    r, g, b = (int(float(p)) for p in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def test_tensorboards_run_colours_links_keyboard_and_downloads(tensorboard, page, tmp_path):
    import csv
    import json

    tab = HealthTab(page, tensorboard).open()
    overview_runs(tab)
    # keyboard: arrows walk the runs
    tab.frame.locator("a.run-link").first.focus()
    first = tab.eval("w => w.document.activeElement.textContent")
    tab.frame.locator("a.run-link").first.press("ArrowDown")
    assert tab.eval("w => w.document.activeElement.textContent") != first
    # the compare view colours each run as TensorBoard does (its palette, in its run order)
    order = get_json(tensorboard + "/data/runs")
    for run in ("spiky", "exp/rank_0"):
        tab.frame.locator(f"tr.run-row[data-run='{run}'] input[type=checkbox]").check()
    tab.frame.locator("button.primary").click()
    tab.wait_until("w => w.document.querySelector(`[data-chart='compare-loss']`).dataset.state === 'ready'")
    for run in ("spiky", "exp/rank_0"):
        swatch = tab.eval("(w, run) => w.getComputedStyle(w.document.querySelector(`.compare-table tr[data-run='${run}'] .swatch`)).backgroundColor", run)
        assert hex_of(swatch) == TB_PALETTE[order.index(run) % len(TB_PALETTE)], run
    # findings download as CSV and JSON
    tab.frame.locator(".run-picker button.pick[data-run='spiky']").click()
    tab.frame.locator("button.tab[data-view='overview']").click()
    open_run(tab, "spiky")
    tab.wait_until("w => w.document.querySelectorAll('li.finding').length > 0")
    shown = tab.eval("w => [...w.document.querySelectorAll('li.finding')].map(f => f.dataset.kind)")
    with page.expect_download() as csv_download:
        tab.frame.locator("button[data-download='csv']").click()
    path = tmp_path / csv_download.value.suggested_filename
    csv_download.value.save_as(path)
    rows = list(csv.DictReader(path.read_text(encoding="utf-8-sig").splitlines()))
    assert [r["kind"] for r in rows] == shown and all(r["run"] == "spiky" for r in rows)
    assert json.loads(next(r for r in rows if r["kind"] == "loss_spike")["evidence"])["peak_step"] >= SPIKE_STEP - 2
    with page.expect_download() as json_download:
        tab.frame.locator("button[data-download='json']").click()
    path = tmp_path / json_download.value.suggested_filename
    json_download.value.save_as(path)
    assert [f["kind"] for f in json.loads(path.read_text())["findings"]] == shown
    # keyboard: arrows walk the findings and zoom to each; Esc leaves the zoom
    tab.frame.locator("li.finding").first.focus()
    tab.frame.locator("li.finding").first.press("ArrowDown")
    tab.wait_until("w => w.document.querySelector('.run-view').dataset.zoom")
    assert tab.eval("w => w.document.activeElement.dataset.key") == tab.eval("w => w.document.querySelectorAll('li.finding')[1].dataset.key")
    tab.frame.locator("li.finding.active").press("Escape")
    tab.wait_until("w => w.document.querySelector('.run-view').dataset.zoom === ''")
    # each chart links to the same run and tag in TensorBoard's Time Series tab
    href = tab.eval("w => w.document.querySelector(`[data-chart='loss'] a.tb-link`).href")
    assert "#timeseries" in href and "runFilter=%5Espiky%24" in href and "tagFilter=%5Etrain%2Floss%24" in href
    scalars = tab.eval("w => w.document.querySelector(`li.finding a.tb-link`).href")
    assert "#scalars&tagFilter=" in scalars and "regexInput=%5Espiky%24" in scalars
    tab.frame.locator("[data-chart='loss'] a.tb-link").click()
    page.wait_for_url("**#timeseries", timeout=30_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('input')].some(i => i.value === '^train/loss$')", timeout=30_000
    )
    assert page.errors == []
