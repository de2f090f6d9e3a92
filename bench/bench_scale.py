"""A 10,000-run logdir (1,250 jobs x 8 ranks) served by a real `tensorboard` with the plugin:
load progress, first listing, first complete analysis, peak memory and the overview route's
latency, first with every rank analysed in full, then with triage (`analysis/triage.py`: ranks
trusted from their own online verdict).

The logdir is written once by the hooks themselves (`trainer_hooks.HealthLogger`, its writer and
its online analysis) and cached under the temporary directory: `TEMPLATE_JOBS` distinct jobs of
8 ranks, each rank 1,000-2,000 steps at the hooks' default `collect_freq` (every 10th step
logged: about 10 tags of 100-200 points), some faulty (a NaN loss, a loss spike, a divergence),
some ranks without online analysis or killed before their final analysis; steps take a simulated
100 ms (the hooks' `StepClock` driven by a clock of the bench's own); every job of the
logdir is a hard-linked copy of one of them (same bytes, own run names).

    python bench/bench_scale.py [--modes on,off] [--load-fast auto,false] [--jobs 1250]
                                [--before DIR] [--requests 200]

`--before DIR`: the same measures first with the plugin's code from DIR (a checkout of an earlier
commit, on TensorBoard's PYTHONPATH), then with this checkout's, side by side in one run.
`--jobs N`: the first N jobs only (a hard-linked copy of them), for quicker runs.

Figures printed; not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import logging
import math
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

JOBS, RANKS = 1250, 8
TEMPLATE_JOBS = 125  # distinct jobs written by the hooks; the logdir's jobs are copies of them
CACHE = Path(tempfile.gettempdir()) / "tb_health_bench_scale_v1"
ANALYSIS_TIMEOUT_S = 3600.0  # of waiting for the server's first complete analysis
POLL_S = 3.0


# ----- the logdir, written by the hooks


# job number modulo 20 -> its fault: one job in ten each has a NaN loss, a loss spike or a
# divergence; one in twenty each has a rank without online analysis or a rank killed before its
# final analysis; the rest are healthy.
FAULTS = {0: "nan", 10: "nan", 1: "spike", 11: "spike", 2: "divergence", 12: "divergence",
          3: "no_online", 13: "killed"}


def _fault_of(job: int) -> str:
    return FAULTS.get(job % 20, "healthy")


def write_template_job(job: int, root: str) -> None:
    """One job of 8 ranks, each written by the hooks as training would (with a custom loop)."""
    from trainer_hooks.health_logger import HealthLogger
    from trainer_hooks.timing import StepClock

    rng = np.random.default_rng(job)
    steps = int(rng.integers(1000, 2001))
    fault = _fault_of(job)
    odd_rank = int(rng.integers(1, RANKS))
    fault_step = int(rng.integers(steps // 3, steps - 100))
    for rank in range(RANKS):
        mine = fault == "divergence" or rank == odd_rank
        logger = HealthLogger(
            log_dir=os.path.join(root, f"job_{job:04d}"), rank=rank, world_size=RANKS,
            online_analysis=not (fault == "no_online" and mine),
            analyze_every=10**9 if fault == "killed" and mine else 10,
        )
        now = iter(np.cumsum(0.1 + 0.002 * rng.standard_normal(steps + 1)))  # ~100 ms steps, simulated
        logger.clock = StepClock(now=lambda now=now: float(next(now)))
        for step in range(1, steps + 1):
            loss = 2.0 * math.exp(-step / 400) + 0.3 + 0.03 * rng.standard_normal()
            grad_norm = 1.0 + 0.05 * rng.standard_normal()
            if mine and fault == "nan" and step >= fault_step:
                loss = float("nan")
            elif mine and fault == "spike" and fault_step <= step < fault_step + 3:
                loss *= 8.0
            elif mine and fault == "divergence" and step >= fault_step:
                loss *= math.exp((step - fault_step) / 150)
                grad_norm *= math.exp((step - fault_step) / 150)
            logger.log_step(step, loss, grad_norm=grad_norm, lr=1e-3 * min(1.0, step / 100))
            if fault == "killed" and mine and step == fault_step:
                logger.online.analyze_now()  # its last online analysis, then it dies
        if fault == "killed" and mine:
            logger.writer.close()  # killed: no final window, no final analysis
        else:
            logger.close()


def _write_template(args: tuple[int, str]) -> None:
    logging.getLogger("trainer_hooks").setLevel(logging.CRITICAL + 1)  # the faults' findings, printed by the hooks
    write_template_job(*args)


def logdir(jobs: int = JOBS) -> Path:
    """The cached 10,000-run logdir, written on first use; with fewer `jobs`, a hard-linked copy of
    its first ones."""
    full = _full_logdir()
    if jobs >= JOBS:
        return full
    target = CACHE / f"logdir_{jobs}"
    if not (target / "complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        for job in range(jobs):
            for rank_dir in (full / f"job_{job:04d}").iterdir():
                out = target / "runs" / f"job_{job:04d}" / rank_dir.name
                out.mkdir(parents=True)
                for file in rank_dir.iterdir():
                    os.link(file, out / file.name)
        (target / "complete").write_text("ok")
    return target / "runs"


def _full_logdir() -> Path:
    done = CACHE / "complete"
    target = CACHE / "logdir"
    if done.exists():
        return target
    shutil.rmtree(CACHE, ignore_errors=True)
    templates = CACHE / "templates"
    templates.mkdir(parents=True)
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="bench-scale-")  # the hooks' helpers may write into the cwd
    with multiprocessing.get_context("spawn").Pool(2, initializer=os.chdir, initargs=(scratch,)) as pool:
        for index, _ in enumerate(pool.imap_unordered(_write_template, [(j, str(templates)) for j in range(TEMPLATE_JOBS)]), 1):
            if index % 25 == 0:
                print(f"  hooks wrote {index}/{TEMPLATE_JOBS} template jobs ({time.monotonic() - started:.0f} s)", flush=True)
    for job in range(JOBS):
        source = templates / f"job_{job % TEMPLATE_JOBS:04d}"
        for rank_dir in source.iterdir():
            out = target / f"job_{job:04d}" / rank_dir.name
            out.mkdir(parents=True)
            for file in rank_dir.iterdir():
                os.link(file, out / file.name)
    done.write_text("ok")
    size = sum(f.stat().st_size for f in templates.rglob("*") if f.is_file())
    print(f"  logdir written in {time.monotonic() - started:.0f} s: {JOBS * RANKS} runs, "
          f"{size / TEMPLATE_JOBS / RANKS / 1024:.0f} KiB a run", flush=True)
    return target


# ----- the server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 900) -> tuple[bytes, float]:
    """(the body as sent, seconds); asks for gzip as a browser does."""
    started = time.perf_counter()
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return body, time.perf_counter() - started


def _json(body: bytes):
    return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


PARTS = ("tensorboard", "worker", "data_server")  # the server's processes, as `part_of` names them


def part_of(process: psutil.Process) -> str:
    """Which part of the server a process of its tree is: TensorBoard's own, the plugin's worker
    or TensorBoard's Rust data server."""
    command = " ".join(process.cmdline())
    if "tb_health_plugin.worker_process" in command:
        return "worker"
    if "data_server" in command or "data-server" in command:
        return "data_server"
    return "tensorboard"


class MemorySampler(threading.Thread):
    """Peak RSS and CPU seconds of each of the server's processes (`PARTS`) and peak RSS of the
    whole tree; CPU seconds (user + system) do not depend on how loaded the machine is."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak_tree = 0
        self.peak = dict.fromkeys(PARTS, 0)
        self.now = dict.fromkeys(PARTS, 0)
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (part, its CPU seconds when last seen)
        self.stop = threading.Event()

    def cpu_s(self, part: str | None = None) -> float:
        """CPU seconds so far of one part, or of the whole tree (a restarted worker's included)."""
        return sum(cpu for name, cpu in self._cpu.values() if part is None or name == part)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            with contextlib.suppress(psutil.Error):
                now = dict.fromkeys(PARTS, 0)
                for process in [self.process, *self.process.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        part = "tensorboard" if process.pid == self.process.pid else part_of(process)
                        now[part] += process.memory_info().rss
                        times = process.cpu_times()
                        self._cpu[process.pid] = (part, times.user + times.system)
                self.now = now
                self.peak_tree = max(self.peak_tree, sum(now.values()))
                self.peak = {part: max(self.peak[part], now[part]) for part in PARTS}


@contextlib.contextmanager
def tensorboard(logdir: Path, server: dict):
    """A real `tensorboard` serving `logdir` with the plugin's code from `server["code"]` (None:
    this checkout's), triage mode `server["mode"]` and `--load_fast` `server["load_fast"]`."""
    port = _free_port()
    command = [str(Path(sys.executable).with_name("tensorboard")), "--logdir", str(logdir),
               "--host", "127.0.0.1", "--port", str(port), "--load_fast", server["load_fast"]]
    code = server["code"] or str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, TB_HEALTH_TRIAGE=server["mode"], TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH")) if p))
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def measure(logdir: Path, server: dict, requests: int, timeout_s: float) -> dict:
    label = server["label"]
    with tensorboard(logdir, server) as (process, base):
        started = time.monotonic()
        sampler = MemorySampler(process.pid)
        sampler.start()
        while True:
            try:
                _get(base + "/data/plugins_listing", timeout=5)
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("tensorboard exited") from None
                time.sleep(0.3)
        up = time.monotonic() - started
        print(f"  [{label}] server up after {up:.1f} s", flush=True)
        runs_url = base + "/data/plugin/health/runs"
        first_listing = first_analysis = None
        listing_cpu = analysis_cpu = {}
        total = None
        while True:
            body, _ = _get(runs_url)
            overview = _json(body)
            elapsed = time.monotonic() - started
            listed = len(overview["runs"])
            analysed = sum(run["status"] != "pending" for run in overview["runs"])
            reading = overview.get("reading")
            read = f" (reading: {reading['runs_read']} of {reading['runs_found']} runs read)" if reading else ""
            total = reading["runs_found"] if reading else (total or listed)
            rss = ", ".join(f"{part} {sampler.now[part] / 2**20:.0f}" for part in PARTS if sampler.now[part])
            print(f"  [{label}] {elapsed:7.1f} s: {listed} runs listed{read}, {analysed} analysed, "
                  f"RSS MiB: {rss}", flush=True)
            cpu = {part: sampler.cpu_s(part) for part in PARTS}
            if first_listing is None and listed == total and not reading:
                first_listing, listing_cpu = elapsed, cpu
            if first_listing is not None and analysed == listed:
                first_analysis, analysis_cpu = elapsed, cpu
                break
            if elapsed > timeout_s:
                print(f"  [{label}] stopped waiting after {timeout_s:.0f} s: {analysed} runs analysed", flush=True)
                break
            time.sleep(POLL_S)
        latencies = [_get(runs_url)[1] for _ in range(requests)]
        sampler.stop.set()
        sampler.join()
    latencies.sort()
    jobs = overview["jobs"]
    return {
        **server,
        "server_up_s": up,
        "first_listing_s": first_listing,
        "first_analysis_s": first_analysis,
        "listing_cpu_s": listing_cpu,
        "analysis_cpu_s": analysis_cpu,
        "analysed": analysed,
        "runs": listed,
        "peak_rss_mib": {part: sampler.peak[part] / 2**20 for part in PARTS},
        "peak_rss_tree_mib": sampler.peak_tree / 2**20,
        "overview_p50_ms": 1000 * statistics.median(latencies),
        "overview_p95_ms": 1000 * latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)],
        "overview_bytes": len(body),  # as sent (gzipped when the server gzips)
        "overview_json_bytes": len(json.dumps(overview)),
        "job_status": {job["job"]: job["status"] for job in jobs},
        "run_status": {run["run"]: (run["status"], run.get("analysis", "full")) for run in overview["runs"]},
        "job_statuses": dict(Counter(job["status"] for job in jobs)),
        "ranks_by_analysis": dict(Counter(run.get("analysis", "full") for run in overview["runs"])),
        "full_reasons": dict(Counter(run["analysis_reason"] for run in overview["runs"] if "analysis_reason" in run)),
    }


def analysis_cpu() -> dict:
    """CPU seconds and memory, in this process, of the distinct jobs read and analysed three ways:
    every rank read and analysed in full; read in full and triaged (as before the heads-only
    reading); read heads-only, the ranks triage analyses in full read again, and triaged (as the
    service does now). Whether each job's verdict and each report are the same. CPU time, not wall
    time: the machine may be shared. The logdir's jobs are byte-identical copies of these, so its
    costs are `JOBS / TEMPLATE_JOBS` times these."""
    from tb_health_plugin.analysis import engine, triage
    from tb_health_plugin.readers import LogdirReader
    from tb_health_plugin.service import heads_only_policy

    def read(heads_only: bool) -> tuple[LogdirReader, float]:
        reader = LogdirReader(CACHE / "templates", heads_only=heads_only_policy("on", dict) if heads_only else None)
        started = time.process_time()
        reader.refresh()
        return reader, time.process_time() - started

    full_reader, read_s = read(False)
    heads_reader, heads_read_s = read(True)
    heads_bytes = heads_reader.memory_bytes()
    full_s = triage_s = heads_s = 0.0
    same, same_reports, trusted, runs_total = 0, 0, 0, 0
    order = ("no_data", "healthy", "warning", "critical")
    by_job: dict[str, list[str]] = {}
    for name in full_reader.run_names():
        by_job.setdefault(name.split("/")[0], []).append(name)
    for members in by_job.values():
        runs = [full_reader.run(name) for name in members]
        started = time.process_time()
        full = engine.analyze_runs(runs, lang=None)
        full_s += time.process_time() - started
        started = time.process_time()
        triaged = triage.analyze_unit(runs, lang=None, triage=True)
        triage_s += time.process_time() - started
        started = time.process_time()  # what the service does for a unit read heads-only
        heads_reader.read_in_full(triage.needing_points([heads_reader.run(name) for name in members], None, True))
        from_heads = triage.analyze_unit([heads_reader.run(name) for name in members], lang=None, triage=True)
        heads_s += time.process_time() - started
        same += max((r["status"] for r in full), key=order.index) == max((r["status"] for r in triaged), key=order.index)
        same_reports += sum(a == b for a, b in zip(triaged, from_heads, strict=True))
        trusted += sum(r["analysis"] == triage.ONLINE for r in triaged)
        runs_total += len(runs)
    return {"runs": runs_total, "jobs": len(by_job), "read_s": read_s, "full_s": full_s, "triage_s": triage_s,
            "same_verdict": same, "trusted": trusted, "heads_read_s": heads_read_s, "heads_s": heads_s,
            "same_reports": same_reports, "full_bytes": full_reader.memory_bytes(), "heads_bytes": heads_bytes,
            "after_bytes": heads_reader.memory_bytes()}


def print_analysis_cpu(runs: int) -> None:
    cpu = analysis_cpu()
    scale = runs / cpu["runs"]
    print(f"\nin-process over the {cpu['jobs']} distinct jobs ({cpu['runs']} runs):\n"
          f"  read in full {cpu['read_s']:.1f} CPU s, {cpu['full_bytes'] / 2**20:.1f} MiB of points; "
          f"analysis of every rank {cpu['full_s']:.1f} CPU s ({1000 * cpu['full_s'] / cpu['runs']:.0f} ms a run), "
          f"triaged {cpu['triage_s']:.1f} CPU s ({cpu['trusted']} of {cpu['runs']} ranks trusted); "
          f"job verdict the same both ways: {cpu['same_verdict']} of {cpu['jobs']} jobs\n"
          f"  read heads-only {cpu['heads_read_s']:.1f} CPU s, {cpu['heads_bytes'] / 2**20:.1f} MiB of points; "
          f"ranks analysed in full read again and triaged {cpu['heads_s']:.1f} CPU s, "
          f"{cpu['after_bytes'] / 2**20:.1f} MiB of points after; reports equal to the full read's: "
          f"{cpu['same_reports']} of {cpu['runs']}\n"
          f"  for {runs} runs: read + triage {scale * (cpu['read_s'] + cpu['triage_s']):.0f} CPU s before, "
          f"{scale * (cpu['heads_read_s'] + cpu['heads_s']):.0f} CPU s now; every rank in full "
          f"{scale * (cpu['read_s'] + cpu['full_s']):.0f} CPU s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="on,off", help="triage modes of the server runs, in order (on, off, auto)")
    parser.add_argument("--load-fast", default="auto", help="TensorBoard's --load_fast values to run with (auto: "
                        "its Rust data server, false: its Python loader), e.g. auto,false")
    parser.add_argument("--jobs", type=int, default=JOBS, help="serve only the first JOBS jobs (8 ranks each)")
    parser.add_argument("--before", default=None, help="a checkout of the plugin's earlier code to measure first")
    parser.add_argument("--requests", type=int, default=200, help="overview requests timed after the load")
    parser.add_argument("--timeout", type=float, default=ANALYSIS_TIMEOUT_S, help="seconds to wait for each first analysis")
    parser.add_argument("--no-cpu", action="store_true", help="skip the in-process CPU comparison")
    parser.add_argument("--no-servers", action="store_true", help="only the in-process CPU comparison")
    args = parser.parse_args()
    target = logdir(args.jobs)
    runs = min(args.jobs, JOBS) * RANKS
    print(f"logdir: {min(args.jobs, JOBS)} jobs x {RANKS} ranks, cached in {CACHE}", flush=True)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    if not args.no_cpu:
        print_analysis_cpu(runs)
    if args.no_servers:
        return
    codes = [("before", args.before), ("after", None)] if args.before else [("this", None)]
    servers = [{"label": f"{code}/triage {mode}/load_fast {fast}", "code": path, "code_name": code, "mode": mode,
                "load_fast": fast}
               for fast in args.load_fast.split(",") for mode in args.modes.split(",") for code, path in codes]
    results = []
    for server in servers:
        results.append(measure(target, server, args.requests, args.timeout))
        r = results[-1]
        rss = ", ".join(f"{part} {r['peak_rss_mib'][part]:.0f}" for part in PARTS)
        print(f"  [{r['label']}] overview p50/p95 {r['overview_p50_ms']:.0f}/{r['overview_p95_ms']:.0f} ms, peak RSS "
              f"MiB: {rss}, tree {r['peak_rss_tree_mib']:.0f}; load average {os.getloadavg()[0]:.1f}", flush=True)
    print_table(results, runs)


def print_table(results: list[dict], runs: int) -> None:
    print()
    print("| code | triage | load_fast | first listing | all analysed (CPU s: worker / TensorBoard) "
          "| peak RSS MiB: worker / TensorBoard / data server / tree | overview p50 / p95 | ranks in full |")
    print("|---|---|---|---|---|---|---|---|")

    def seconds(value, cpu):
        if value is None:
            return "not within the timeout"
        return f"{value:.0f} s ({cpu.get('worker', 0):.0f} / {cpu.get('tensorboard', 0):.0f})"

    for r in results:
        rss = r["peak_rss_mib"]
        print(f"| {r['code_name']} | {r['mode']} | {r['load_fast']} | {seconds(r['first_listing_s'], r['listing_cpu_s'])} | "
              f"{seconds(r['first_analysis_s'], r['analysis_cpu_s'])} | "
              f"{rss['worker']:.0f} / {rss['tensorboard']:.0f} / {rss['data_server']:.0f} / {r['peak_rss_tree_mib']:.0f} | "
              f"{r['overview_p50_ms']:.0f} / {r['overview_p95_ms']:.0f} ms | {r['ranks_by_analysis'].get('full', 0)} of {runs} |")
    for r in results:
        print(f"  [{r['label']}] job verdicts: {r['job_statuses']}; why analysed in full: {r['full_reasons']}")
    by_mode: dict[str, list[dict]] = {}
    for r in results:
        by_mode.setdefault(r["mode"], []).append(r)
    reference = results[0]
    for r in results[1:]:
        same_jobs = sum(reference["job_status"].get(job) == status for job, status in r["job_status"].items())
        print(f"  job verdicts equal between [{reference['label']}] and [{r['label']}]: "
              f"{same_jobs} of {len(r['job_status'])}")
    for group in by_mode.values():
        for r in group[1:]:
            same_runs = sum(group[0]["run_status"].get(run) == row for run, row in r["run_status"].items())
            print(f"  run verdicts and analysis equal between [{group[0]['label']}] and [{r['label']}]: "
                  f"{same_runs} of {len(r['run_status'])}")


if __name__ == "__main__":
    main()
