"""The Health routes under load in a real TensorBoard process: 1000+ runs, concurrent pollers.

    PYTHONPATH=. python bench/bench_routes_load.py [--jobs 250] [--ranks 4] [--clients 4] [--window-s 8]
        [--baseline TREE] [--python-loader]

Builds a logdir of `jobs x ranks` small runs (`job_<i>/rank_<r>`, 300 steps of loss, lr, grad
norm and two per-parameter norms) plus one big run, starts `tensorboard` on a free loopback port
(`--load_fast=true`, TensorBoard's default when its Rust data server is installed: that server
loads the logdir once in its own process, so the CPU and memory of the tensorboard process are
the web app's and the plugin's) and polls the routes from a few concurrent clients on
127.0.0.1, in phases:

1. cold start: time until `runs` lists every run analysed;
2. idle: the server's CPU while nobody polls;
3. polling an unchanged logdir, several windows: latency per route (p50, p95) and server CPU per
   window, which must stay flat (no repeated reading or analysis);
4. a slow analysis: points are appended to the big run, whose re-analysis takes seconds; the
   other routes are polled meanwhile and must stay as fast as in phase 3;
5. a full re-analysis: a `tb-health.toml` naming the loss tag every run already uses changes
   every unit's analysis key, so every run is analysed again while the routes are polled
   (target: `runs` p95 <= 150 ms);
6. the plugin's data layer alone, in a fresh process.

`--baseline TREE` runs phases 1-5 first with another checkout of the package (say the previous
commit: `git archive <commit> tb_health_plugin | tar -x -C TREE`) on a copy of the same logdir,
and prints both side by side. `--python-loader` starts TensorBoard with `--load_fast=false`.

Server memory is the tensorboard process's RSS from /proc (the data server's is printed apart).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import google_crc32c
import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary


def _load_server_helpers():
    """tests/tensorboard_server.py by path: importing the `tests` package would load MindSpore."""
    path = Path(__file__).resolve().parents[1] / "tests" / "tensorboard_server.py"
    spec = importlib.util.spec_from_file_location("tensorboard_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_server = _load_server_helpers()
get_json, running_tensorboard = _server.get_json, _server.running_tensorboard

PREFIX = "/data/plugin/health"
SMALL_STEPS = 300
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ----- the logdir


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _record(event: Event) -> bytes:
    payload = event.SerializeToString()
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", _masked_crc(header)) + payload + struct.pack("<I", _masked_crc(payload))


def scalar_records(series: dict[str, np.ndarray], first_step: int = 0) -> bytes:
    """TFRecord-framed simple_value events, exactly as TensorBoard's EventFileWriter frames them."""
    parts = []
    for tag, values in series.items():
        for offset, value in enumerate(values.tolist()):
            step = first_step + offset
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
            parts.append(_record(Event(wall_time=1_767_000_000.0 + step, step=step, summary=summary)))
    return b"".join(parts)


def small_run(rng: np.random.Generator) -> dict[str, np.ndarray]:
    steps = np.arange(SMALL_STEPS)
    loss = 2.0 / (1 + steps / 50.0) + rng.normal(0, 0.02, SMALL_STEPS)
    return {
        "train/loss": loss, "train/lr": np.full(SMALL_STEPS, 1e-3), "train/grad_norm": np.abs(loss) + 0.1,
        "grad_norm/layers.0.w": np.abs(loss) * 0.5, "grad_norm/layers.1.w": np.abs(loss) * 0.7,
    }


def big_run(points: int, start: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    steps = np.arange(start, start + points)
    return {"train/loss": 2.0 / (1 + steps / 5000.0) + rng.normal(0, 0.01, points)}


def event_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "events.out.tfevents.1767000000.benchhost.1.0"


def build_logdir(root: Path, jobs: int, ranks: int, big_points: int) -> list[str]:
    rng = np.random.default_rng(0)
    runs = []
    for job in range(jobs):
        for rank in range(ranks):
            name = f"job_{job:03d}/rank_{rank}"
            event_file(root / name).write_bytes(scalar_records(small_run(rng)))
            runs.append(name)
    event_file(root / "big").write_bytes(scalar_records(big_run(big_points, 0, rng)))
    return runs


# ----- the server process


def server_pid(port: int) -> int:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in args and args[args.index(b"--port") + 1] == str(port).encode():
            return int(entry)
    raise RuntimeError("tensorboard process not found")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def child_pids(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry))
    return children


def memory_text(pid: int) -> str:
    rss, hwm = memory_mb(pid)
    others = sum(memory_mb(child)[0] for child in child_pids(pid))
    return f"RSS {rss:.0f} MB (peak {hwm:.0f} MB); its children (data server, analysis worker) {others:.0f} MB"


def memory_mb(pid: int) -> tuple[float, float]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


# ----- polling


def fetch(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
            code = response.status
    except urllib.error.HTTPError as error:
        code = error.code
    return code, time.perf_counter() - started


def route_urls(base: str, runs: list[str], rng: random.Random) -> dict[str, callable]:
    def run() -> str:
        return quote(rng.choice(runs), safe="")

    return {
        "runs": lambda: f"{base}{PREFIX}/runs",
        "report": lambda: f"{base}{PREFIX}/report?run={run()}",
        "tags": lambda: f"{base}{PREFIX}/tags?run={run()}",
        "series": lambda: f"{base}{PREFIX}/series?run={run()}&tag=train%2Floss&width=500",
        "heatmap": lambda: f"{base}{PREFIX}/heatmap?run={run()}&width=100",
        "index.js": lambda: f"{base}{PREFIX}/index.js",
    }


def poll(urls: dict[str, callable], clients: int, seconds: float) -> dict[str, list[float]]:
    """`clients` threads cycle through the routes until the deadline; latencies per route."""
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    names = list(urls)

    def client(offset: int) -> None:
        turn = offset
        while time.monotonic() < deadline:
            name = names[turn % len(names)]
            turn += 1
            code, took = fetch(urls[name]())
            with lock:
                latencies[name].append(took)
                if code != 200:
                    errors.append(f"{name}: {code}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[:3]}")
    return latencies


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q) * 1000) if values else float("nan")


def print_latencies(title: str, latencies: dict[str, list[float]]) -> None:
    print(f"  {title}")
    for name, values in sorted(latencies.items()):
        print(f"    {name:<9} n={len(values):>5}  p50 {percentile_ms(values, 50):8.1f} ms  "
              f"p95 {percentile_ms(values, 95):8.1f} ms  max {max(values) * 1000:8.1f} ms")


def settle_idle(pid: int, sample_s: float = 3.0, limit_s: float = 120.0) -> tuple[float, float]:
    """CPU rate of the server with no client, once two samples in a row agree (TensorBoard's own
    load of the logdir at start is over): (rate in cores, seconds waited)."""
    started = time.monotonic()
    rates: list[float] = []
    while time.monotonic() - started < limit_s:
        before = cpu_seconds(pid)
        time.sleep(sample_s)
        rates.append((cpu_seconds(pid) - before) / sample_s)
        if len(rates) >= 2 and abs(rates[-1] - rates[-2]) < 0.03 and rates[-1] < 0.25:
            break
    return rates[-1], time.monotonic() - started


PLUGIN_ALONE = """
import os, sys, time
from tb_health_plugin.service import HealthService
service = HealthService(sys.argv[1], refresh_interval_s=2.0)
started = time.perf_counter()
while any(report is None for report in service.reports().values()):
    time.sleep(0.5)
took = time.perf_counter() - started
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
time.sleep(3)
cpu, wall, analyses, refreshes = sum(os.times()[:2]), time.perf_counter(), service.analysis_count, service.refresh_count
time.sleep(12)
idle = (sum(os.times()[:2]) - cpu) / (time.perf_counter() - wall)
print(f"{took:.1f} {int(status['VmHWM'].split()[0]) / 1024:.0f} {service._reader.memory_bytes() / 2**20:.0f} "
      f"{idle:.4f} {service.refresh_count - refreshes} {service.analysis_count - analyses}")
service.stop()
"""


def plugin_alone(logdir: Path) -> list[float]:
    """The plugin's data layer alone in a fresh process: s to analyse all, peak RSS MB, series MB,
    then idle: CPU share, refreshes and analyses in 12 s."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "-c", PLUGIN_ALONE, str(logdir)], capture_output=True, text=True,
                          env=env, timeout=1800, check=True)
    return [float(x) for x in done.stdout.split()]


def wait_for_all_analysed(base: str, expected: int, timeout_s: float = 600) -> float:
    started = time.perf_counter()
    while True:
        runs = get_json(f"{base}{PREFIX}/runs", timeout=120)["runs"]
        if len(runs) == expected and all(r["status"] != "pending" for r in runs):
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError("the runs were not all analysed in time")
        time.sleep(1.0)


def full_reanalysis(base: str, logdir: Path, urls: dict[str, callable], clients: int, seconds: float):
    """Phase 5: `tb-health.toml` names the loss tag every run already uses, which changes the
    analysis key of every unit: all of them are analysed again, while the routes are polled."""
    (logdir / "tb-health.toml").write_text('[tags]\nloss = "train/loss"\n')
    during = poll(urls, clients, seconds)
    state = get_json(f"{base}{PREFIX}/runs", timeout=120).get("analysis")
    return during, state


def measure(logdir: Path, tree: Path, args, label: str) -> dict[str, float]:
    """Phases 1-5 on `logdir` with the plugin of `tree`; the figures for the side-by-side table."""
    rng = random.Random(0)
    small = sorted(str(p.parent.relative_to(logdir)) for p in logdir.glob("job_*/rank_*/events.*"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p))
    figures: dict[str, float] = {}
    print(f"== {label} ({tree})", flush=True)
    with running_tensorboard(logdir, load_fast=not args.python_loader, reload_interval_s=0, env=env) as base:
        pid = server_pid(int(base.rsplit(":", 1)[1]))
        print(f"tensorboard pid {pid} at {base}; {memory_text(pid)} before the first request")
        cold = wait_for_all_analysed(base, len(small) + 1)
        figures["cold_s"] = cold
        print(f"1. cold start: every run analysed after {cold:.1f} s; {memory_text(pid)}", flush=True)

        idle_rate, waited = settle_idle(pid)
        print(f"2. idle: server CPU {idle_rate * 100:.1f}% of a core (TensorBoard and the plugin's refresher), "
              f"{waited:.0f} s after the cold start")

        urls = route_urls(base, small, rng)
        print(f"3. polling the unchanged logdir: {args.clients} clients, {args.windows} windows of {args.window_s:.0f} s")
        steady: dict[str, list[float]] = defaultdict(list)
        for window in range(args.windows):
            cpu_before = cpu_seconds(pid)
            latencies = poll(urls, args.clients, args.window_s)
            cpu = cpu_seconds(pid) - cpu_before
            requests = sum(len(v) for v in latencies.values())
            for name, values in latencies.items():
                steady[name].extend(values)
            print(f"  window {window + 1}: {requests} requests, server CPU {cpu:.2f} s "
                  f"({cpu / requests * 1000:.1f} ms/request), runs p50 {percentile_ms(latencies['runs'], 50):.0f} ms")
        print_latencies("all windows:", steady)
        print(f"  {memory_text(pid)}", flush=True)
        figures["steady_runs_p50"], figures["steady_runs_p95"] = (percentile_ms(steady["runs"], q) for q in (50, 95))

        print(f"4. slow analysis: {args.append_points:,} points appended to 'big', other runs polled meanwhile")
        expected_last = args.big_points + args.append_points - 1
        with open(event_file(logdir / "big"), "ab") as handle:
            handle.write(scalar_records(big_run(args.append_points, args.big_points, np.random.default_rng(1)),
                                        first_step=args.big_points))
        appended = time.perf_counter()
        big_ready: list[float] = []

        def wait_big_report() -> None:
            while time.perf_counter() - appended < 600:
                report = get_json(f"{base}{PREFIX}/report?run=big", timeout=300)["runs"][0]
                if report["steps"]["last"] == expected_last:
                    big_ready.append(time.perf_counter() - appended)
                    return
                time.sleep(0.1)

        waiter = threading.Thread(target=wait_big_report)
        waiter.start()
        during = poll(urls, args.clients, args.window_s)
        waiter.join()
        print_latencies("other runs while 'big' is read and re-analysed:", during)
        if big_ready:
            print(f"    'big' reported its {expected_last + 1:,} points {big_ready[0]:.1f} s after the append "
                  f"(refresh, read, analysis)")
        for name in ("report", "series", "tags", "runs"):
            ratio = statistics.median(during[name]) / statistics.median(steady[name])
            print(f"    {name} p50 during / steady: x{ratio:.2f}")
        print(f"  {memory_text(pid)}", flush=True)
        figures["slow_runs_p50"], figures["slow_runs_p95"] = (percentile_ms(during["runs"], q) for q in (50, 95))

        print(f"5. full re-analysis: tb-health.toml changes every unit's analysis, routes polled {args.reanalysis_s:.0f} s")
        during, state = full_reanalysis(base, logdir, urls, args.clients, args.reanalysis_s)
        print_latencies("every route while every run is analysed again:", during)
        if state:
            print(f"    at the end of the window: {state['done']} of {state['total']} runs re-analysed ({state['state']})")
        print(f"  {memory_text(pid)}", flush=True)
        figures["full_runs_p50"], figures["full_runs_p95"] = (percentile_ms(during["runs"], q) for q in (50, 95))
        figures["rss_mb"] = memory_mb(pid)[0]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=250)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--big-points", type=int, default=400_000)
    parser.add_argument("--append-points", type=int, default=1_200_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--reanalysis-s", type=float, default=20.0, help="phase 5's polling window")
    parser.add_argument("--python-loader", action="store_true", help="TensorBoard's --load_fast=false")
    parser.add_argument("--baseline", type=Path, help="another checkout of the package, measured first on a copy")
    parser.add_argument("--skip-alone", action="store_true", help="skip phase 6 (the data layer alone)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tb-health-load-") as tmp:
        logdir = Path(tmp) / "logs"
        started = time.perf_counter()
        small = build_logdir(logdir, args.jobs, args.ranks, args.big_points)
        size_mb = sum(p.stat().st_size for p in logdir.rglob("*tfevents*")) / 1e6
        print(f"logdir: {len(small) + 1} runs ({len(small)} of {SMALL_STEPS} steps x 5 tags, one of "
              f"{args.big_points:,} points), {size_mb:.1f} MB, written in {time.perf_counter() - started:.1f} s")
        results = []
        if args.baseline:
            copy = Path(tmp) / "baseline-logs"
            shutil.copytree(logdir, copy)
            results.append(("baseline", measure(copy, args.baseline, args, "baseline")))
        this_tree = Path(__file__).resolve().parents[1]
        results.append(("this tree", measure(logdir, this_tree, args, "this tree")))
        if len(results) > 1:
            print("side by side (ms; runs route, 4 clients polling every route):")
            print(f"  {'':10s} {'cold s':>7s} {'steady p50/p95':>15s} {'slow analysis':>15s} "
                  f"{'full re-analysis':>17s} {'RSS MB':>7s}")
            for label, f in results:
                print(f"  {label:10s} {f['cold_s']:7.1f} {f['steady_runs_p50']:7.0f}/{f['steady_runs_p95']:<7.0f} "
                      f"{f['slow_runs_p50']:7.0f}/{f['slow_runs_p95']:<7.0f} {f['full_runs_p50']:8.0f}/"
                      f"{f['full_runs_p95']:<8.0f} {f['rss_mb']:7.0f}")

        if not args.skip_alone:
            took, peak, series, idle, refreshes, analyses = plugin_alone(logdir)
            print(f"6. the plugin's data layer alone (HealthService in a fresh process, no TensorBoard loader): "
                  f"every run analysed in {took:.1f} s, peak RSS {peak:.0f} MB, series buffers {series:.0f} MB; "
                  f"then idle {idle * 100:.1f}% of a core, {refreshes:.0f} refreshes and {analyses:.0f} analyses in 12 s")


if __name__ == "__main__":
    main()
