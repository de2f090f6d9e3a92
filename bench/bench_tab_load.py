"""Time from opening a 1M-step run in the Health tab to its charts being drawn, in headless Chromium.

    PYTHONPATH=. python bench/bench_tab_load.py [--steps 1000000] [--repeats 5]

Writes one run of `--steps` logged steps (loss, learning rate, gradient norm, throughput, and 16
per-layer gradient norms every 100 steps) plus a small run, starts a real `tensorboard` on it,
opens the Health tab and, `--repeats` times, reloads it, clicks the big run and waits for every
chart (including the heatmap) to be drawn, with smoothing (0.6) and a log y axis on. The figure is the tab's own `performance.measure` from
the click to the last chart's draw; the wall time seen from Python is printed beside it. The cold
start (the first request after TensorBoard starts reads and analyses every point) is reported
apart.
With `--listing-only` it times just that first listing, the run listed by the tab after
TensorBoard starts (a row, pending while the run is read and analysed), and then its verdict in
that row, under both of TensorBoard's loaders (`--load_fast=false`, its Python loader in the same
interpreter as the plugin's routes, and `true`, the Rust data server), and with `--baseline TREE`
the same for another checkout of the package (say the previous commit,
`git archive <commit> | tar -x -C TREE`), side by side on the same logdir. Both are timed from
TensorBoard answering, as the tab can be opened; TensorBoard's own start-up before it (during
which the plugin's worker already reads) is printed beside them.
It also times the data routes directly, and the same `series` request without downsampling
(`width` = every point, capped by the route) side by side. Target: under 1 s. Not part of the
test suite.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tb_health_plugin.tfrecord import frame  # TFRecord framing, as TensorBoard's writer lays it out

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _load(name: str):
    """A helper module of tests/ by path: importing the `tests` package would import MindSpore,
    which switches protobuf (here and in the TensorBoard child) to its slow pure-Python backend."""
    spec = importlib.util.spec_from_file_location(f"tab_bench_{name}", TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_browser = _load("browser")
_server = _load("tensorboard_server")
HealthTab, browser_page = _browser.HealthTab, _browser.browser_page
get_json, running_tensorboard = _server.get_json, _server.running_tensorboard

BIG_RUN = "big"
CHART_SETTINGS = {"yScale": "log", "smoothing": 0.6, "ignoreOutliers": False, "xAxis": "step"}
LAYERS = 16
LAYER_EVERY = 100


def write_run(folder: Path, steps: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = np.arange(steps)
    series = {
        "train/loss": 3.0 * np.exp(-x / (steps / 4)) + 0.5 + rng.normal(0, 0.02, steps),
        "train/lr": np.minimum(1e-3, (x + 1) * 1e-7),
        "train/grad_norm": 1.0 + 0.1 * rng.random(steps),
        "train/throughput": 900 + rng.normal(0, 5, steps),
    }
    series["train/loss"][steps // 3] = 40.0  # one spike
    with open(folder / "events.out.tfevents.1767000000.bench", "wb") as out:
        out.write(frame(Event(wall_time=1.767e9, file_version="brain.Event:2").SerializeToString()))
        chunk = []
        for step in range(steps):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v[step])) for tag, v in series.items()])
            chunk.append(frame(Event(wall_time=1.767e9 + step, step=step, summary=summary).SerializeToString()))
            if step % LAYER_EVERY == 0:
                layers = [
                    Summary.Value(tag=f"grad_norm/model.layers.{i}.attention.wq.weight", simple_value=10.0 ** (i / 4 - 4))
                    for i in range(LAYERS)
                ]
                chunk.append(frame(Event(wall_time=1.767e9 + step, step=step, summary=Summary(value=layers)).SerializeToString()))
            if len(chunk) >= 50_000:
                out.write(b"".join(chunk))
                chunk.clear()
        out.write(b"".join(chunk))


def open_run(tab: HealthTab) -> tuple[float, float]:
    """(in-page ms from click to every chart drawn, wall ms seen from Python)."""
    tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0", timeout_s=600)
    link = tab.frame.locator(f"tr.run-row[data-run='{BIG_RUN}'] a.run-link")
    started = time.perf_counter()
    link.click()
    drawn = tab.wait_until(
        "w => w.document.body.dataset.chartsDrawnMs && w.document.querySelector(`[data-chart='heatmap']`)?.dataset.state === 'ready' && w.document.body.dataset.chartsDrawnMs",
        timeout_s=600,
        interval_s=0.01,
    )
    return float(drawn), (time.perf_counter() - started) * 1000


def first_listing(logdir: Path, load_fast: bool, tree: Path) -> tuple[float, float, float, float]:
    """With the package of `tree`: (seconds from TensorBoard's launch to its answering; from its
    answering to the tab's page shown, to the tab listing the big run, pending or not, and to the
    tab showing its verdict)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p))
    launched = time.perf_counter()
    with running_tensorboard(logdir, load_fast=load_fast, env=env) as base, browser_page() as page:
        started = time.perf_counter()
        tab = HealthTab(page, base).open()
        shown = time.perf_counter() - started
        row = f"w.document.querySelector(`tr.run-row[data-run='{BIG_RUN}']`)"
        tab.wait_until(f"w => {row} !== null", timeout_s=900)
        listed = time.perf_counter() - started
        tab.wait_until(f"w => {row}?.dataset.status && {row}.dataset.status !== 'pending'", timeout_s=900)
        return started - launched, shown, listed, time.perf_counter() - started


def listing_table(logdir: Path, baseline: Path | None) -> None:
    trees = [("this tree", TESTS.parent)] + ([("baseline", baseline)] if baseline else [])
    print(f"load average before: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("the big run after TensorBoard answers (s), target: listed <= 10 s; the tab lists a run still being")
    print("read or analysed as pending, its verdict follows (in brackets: TensorBoard's own start-up")
    print("before it answered, and when the tab's page was shown, before its first `runs` answer):")
    for label, tree in trees:
        for load_fast in (False, True):
            start_up, shown, listed, verdict = first_listing(logdir, load_fast, tree)
            print(f"  {label:10s} --load_fast={'true ' if load_fast else 'false'} listed {listed:6.1f} s, "
                  f"verdict {verdict:6.1f} s  (start-up {start_up:.1f} s, page {shown:.1f} s)", flush=True)
    print(f"load average after: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


def time_route(url: str, repeats: int = 3) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=600) as response:
            size = len(response.read())
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load-fast", choices=("true", "false"), default="false",
                        help="TensorBoard's loader for the chart timings (false: its Python loader)")
    parser.add_argument("--listing-only", action="store_true", help="time only the first listing, both loaders")
    parser.add_argument("--baseline", type=Path, help="another checkout of the package to time beside this one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tab-bench-") as tmp:
        logdir = Path(tmp)
        started = time.perf_counter()
        write_run(logdir / BIG_RUN, args.steps)
        write_run(logdir / "small", 1000)
        print(f"wrote {args.steps:,} steps ({4 * args.steps:,} scalar points) in {time.perf_counter() - started:.1f} s")
        if args.listing_only:
            listing_table(logdir, args.baseline)
            return
        with running_tensorboard(logdir, load_fast=args.load_fast == "true") as base, browser_page() as page:
            started = time.perf_counter()
            tab = HealthTab(page, base).open()
            tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0", timeout_s=600)
            print(
                f"cold: overview listed {time.perf_counter() - started:.1f} s after opening the tab "
                "(TensorBoard reads and analyses every point on the first request)"
            )
            # as the issue asks: smoothing (TensorBoard's default weight) and a log y axis on every chart
            tab.eval("(w, s) => w.localStorage.setItem('tb-health.charts', JSON.stringify(s))", CHART_SETTINGS)
            tab.open()
            tab.wait_until("w => w.document.querySelectorAll('tr.run-row').length > 0", timeout_s=600)
            first = open_run(tab)
            print(f"first run open in this page: {first[0]:.0f} ms in page, {first[1]:.0f} ms wall")
            in_page, wall = [], []
            for _ in range(args.repeats):
                tab.eval("w => w.sessionStorage.clear()")  # start from the overview, not the last run
                tab.open()
                ms, wall_ms = open_run(tab)
                in_page.append(ms)
                wall.append(wall_ms)
            print(
                f"open run -> charts drawn ({args.repeats} repeats): median {statistics.median(in_page):.0f} ms "
                f"(min {min(in_page):.0f}, max {max(in_page):.0f}) in page; median {statistics.median(wall):.0f} ms wall"
            )
            scales = tab.eval("w => [...w.document.querySelectorAll('[data-chart][data-scale]')].map(c => c.dataset.scale + '/' + c.dataset.smoothing)")
            print(f"charts drawn with (scale/smoothing): {', '.join(scales)}")
            print(f"target < 1000 ms: {'met' if statistics.median(in_page) < 1000 else 'NOT met'}")
            run = urllib.parse.quote(BIG_RUN)
            prefix = f"{base}/data/plugin/health"
            rows = [
                ("tags", f"{prefix}/tags?run={run}"),
                ("report", f"{prefix}/report?run={run}"),
                ("series width=1200 (what a chart asks)", f"{prefix}/series?run={run}&tag=train/loss&width=1200"),
                ("series width=20000 (route maximum)", f"{prefix}/series?run={run}&tag=train/loss&width=20000"),
                ("heatmap width=600", f"{prefix}/heatmap?run={run}&width=600"),
            ]
            print("route timings (median of 3):")
            figures = {}
            for name, url in rows:
                ms, size = time_route(url)
                figures[name] = ms
                print(f"  {name:40s} {ms:8.1f} ms {size / 1024:9.1f} KiB")
            ratio = figures["series width=20000 (route maximum)"] / figures["series width=1200 (what a chart asks)"]
            print(f"  20000 vs 1200 buckets: {ratio:.1f}x the time for invisible detail")
            get_json(f"{prefix}/runs")


if __name__ == "__main__":
    main()
