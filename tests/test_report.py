"""`tb-health report`: one self-contained HTML (opened in headless Chromium with the network cut
off) or Markdown file with every run's verdict, each finding with a chart, the configuration as
logged and what was read; text from the logs never becomes markup."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorboardX import SummaryWriter

from tb_health_plugin.cli import main
from tests.browser import browser_page, chromium_path
from trainer_hooks import HealthLogger

HOSTILE_RUN = "evil<img src=x onerror=alert(1)>"
HOSTILE_CONFIG = "<script>document.title='owned'</script> learning_rate: 0.001"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Rank 0 of job `exp`: a one-step loss spike at 400, then a blow-up from 700; a healthy run
    whose job folder's name is markup; a configuration text logged by the user's own writer."""
    root = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(0)
    for job, breaks in (("exp", True), (HOSTILE_RUN, False)):
        with HealthLogger(root / job, rank=0, collect_freq=5, online_analysis=False) as health:
            for step in range(1, 1001):
                loss = 3 * np.exp(-step / 300) + 0.5 + 0.05 * rng.normal()
                if breaks and step > 700:
                    loss *= np.exp((step - 700) / 40)
                if breaks and step == 400:
                    loss *= 8
                health.log_step(step, float(loss), grad_norm=1.0 + 0.1 * rng.normal(), lr=1e-3)
    with SummaryWriter(str(root / "exp" / "rank_0")) as writer:
        writer.add_text("config/args", HOSTILE_CONFIG, 0)
    return root


def test_the_html_report_needs_nothing_else_and_shows_every_finding(logdir, tmp_path, capsys):
    if chromium_path() is None:
        pytest.skip("chromium is not installed")
    out = tmp_path / "report.html"
    assert main(["report", str(logdir), "-o", str(out), "--lang", "en"]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<script" not in html.replace("&lt;script", "")  # the logged text is escaped, no script of ours
    assert html.count("<svg") >= 2

    requests, dialogs = [], []
    with browser_page() as page:
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.on("request", lambda request: requests.append(request.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                   else route.abort())
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        verdicts = page.locator("table").first.inner_text()
        headings = page.locator("h3").all_inner_texts()
        charts = page.locator(".finding .chart svg").count()
        findings = page.locator(".finding").count()
        title = page.title()
        config = page.locator("pre").all_inner_texts()
    assert [url for url in requests if not url.startswith("file:")] == []  # nothing fetched
    assert dialogs == [] and title.startswith("Training health report")
    assert "exp/rank_0\tcritical" in verdicts and HOSTILE_RUN in verdicts  # the name shown as text
    assert any("divergence" in h for h in headings) and any("loss_spike" in h for h in headings)
    assert charts >= 2 and charts <= findings
    assert HOSTILE_CONFIG in config
    assert "What was read" in headings


def test_the_markdown_report_in_chinese_carries_the_same_findings(logdir, tmp_path, capsys):
    out = tmp_path / "report.md"
    assert main(["report", str(logdir), "-o", str(out), "--lang", "zh"]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# 训练健康报告")
    assert "| exp/rank_0 | 严重 |" in text
    assert "divergence" in text and "loss_spike" in text
    assert text.count("](data:image/svg+xml;base64,") >= 2  # charts inline, nothing to fetch
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "events.out.tfevents" in text  # what was read


def test_report_says_what_is_wrong_with_its_arguments(logdir, tmp_path, capsys):
    assert main(["report", str(logdir), "-o", str(tmp_path / "report.pdf")]) == 2
    assert ".html or .md" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_the_tab_offers_the_report_of_the_runs_on_screen(logdir):
    """The overview's Report link names the runs its filters show; TensorBoard serves that report."""
    import urllib.request

    from tests.browser import HealthTab
    from tests.tensorboard_server import get_json, running_tensorboard

    if chromium_path() is None:
        pytest.skip("chromium is not installed")
    with running_tensorboard(logdir) as base, browser_page() as page:
        get_json(base + "/data/plugin/health/runs", timeout=120)
        tab = HealthTab(page, base).open()
        tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length >= 2")
        tab.frame.locator("input.name-filter").fill("exp")
        href = tab.wait_until("w => { const a = w.document.querySelector('a.report-link');"
                              " return a && !a.href.includes('evil') && a.href; }")
        with urllib.request.urlopen(href, timeout=120) as response:
            html = response.read().decode()
            disposition = response.headers["Content-Disposition"]
    assert "run=exp%2Frank_0" in href and "lang=en" in href
    assert disposition.startswith("attachment") and html.startswith("<!doctype html>")
    assert "divergence" in html and "evil" not in html


def test_the_report_takes_one_snapshot_of_each_run(logdir, tmp_path, monkeypatch):
    """The analysis and the charts come from the same snapshot of each run, taken once."""
    from tb_health_plugin.commands.report import write_report
    from tb_health_plugin.readers import LogdirReader

    taken: list[str] = []
    original = LogdirReader.run

    def counted(self, name):
        taken.append(name)
        return original(self, name)

    monkeypatch.setattr(LogdirReader, "run", counted)
    text = write_report(str(logdir), "md", "en")
    assert text and sorted(taken) == sorted(set(taken)) and len(taken) == 2


def report_command(logdir, out, *args: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", "report", str(logdir), "-o", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_workers_write_the_report_of_one_process_and_say_how_far_they_are(logdir, tmp_path):
    """`--jobs 3` analyses and draws in worker processes: the same text, charts included."""
    alone = report_command(logdir, tmp_path / "alone.md", "--jobs", "1", "--lang", "en")
    shared = report_command(logdir, tmp_path / "shared.md", "--jobs", "3", "--lang", "en", "--progress", "always")
    assert alone.returncode == 0 and shared.returncode == 0, shared.stderr
    generated = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")  # the minute it was written
    texts = [generated.sub("WHEN", (tmp_path / name).read_text(encoding="utf-8")) for name in ("alone.md", "shared.md")]
    assert texts[0] == texts[1] and texts[0].count("](data:image/svg+xml;base64,") >= 2
    assert "analysed 2/2 runs" in shared.stderr and re.search(r"drew (\d+)/\1 charts", shared.stderr)
    assert alone.stderr.strip().endswith("wrote " + str(tmp_path / "alone.md"))  # not a terminal: no progress


def test_report_jobs_must_be_a_positive_count(logdir, tmp_path):
    result = report_command(logdir, tmp_path / "r.md", "--jobs", "0")
    assert result.returncode == 2 and "--jobs" in result.stderr


def test_charts_drawn_in_process_keep_blas_on_one_thread(monkeypatch):
    """OpenBLAS's idle threads spun as much CPU as the drawing itself: one thread while drawing."""
    from threadpoolctl import threadpool_info

    from tb_health_plugin.report import charts

    seen = []
    monkeypatch.setattr(charts.ChartTask, "draw", lambda task: seen.append(
        [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]) or "<svg/>")
    steps = np.arange(100)
    tasks = [charts.chart_task(steps, np.exp(-steps / 30.0), "loss", 40, 45) for _ in range(3)]
    done = []
    assert charts.draw_here(tasks, lambda d, n: done.append((d, n))) == ["<svg/>"] * 3
    assert seen and all(threads and set(threads) == {1} for threads in seen)
    assert done == [(1, 3), (2, 3), (3, 3)]
