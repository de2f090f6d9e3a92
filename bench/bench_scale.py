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

    python bench/bench_scale.py [--modes off,on] [--requests 200]

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


def logdir() -> Path:
    """The cached 10,000-run logdir, written on first use."""
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


class MemorySampler(threading.Thread):
    """Peak RSS of the server's process and of its whole tree (with the data server)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak_main = self.peak_tree = self.now_main = 0
        self.cpu_s = 0.0  # the server process's CPU seconds (user + system), contention-independent
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            with contextlib.suppress(psutil.Error):
                main = self.process.memory_info().rss
                tree = main + sum(c.memory_info().rss for c in self.process.children(recursive=True))
                self.now_main = main
                times = self.process.cpu_times()
                self.cpu_s = times.user + times.system
                self.peak_main, self.peak_tree = max(self.peak_main, main), max(self.peak_tree, tree)


@contextlib.contextmanager
def tensorboard(logdir: Path, triage_mode: str):
    port = _free_port()
    command = [str(Path(sys.executable).with_name("tensorboard")), "--logdir", str(logdir),
               "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, TB_HEALTH_TRIAGE=triage_mode, TF_CPP_MIN_LOG_LEVEL="3")
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


def measure(logdir: Path, triage_mode: str, requests: int, timeout_s: float) -> dict:
    runs_url = None
    with tensorboard(logdir, triage_mode) as (process, base):
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
        print(f"  [{triage_mode}] server up after {up:.1f} s", flush=True)
        runs_url = base + "/data/plugin/health/runs"
        first_listing = first_analysis = listing_cpu = analysis_cpu = None
        while True:
            body, _ = _get(runs_url)
            overview = _json(body)
            elapsed = time.monotonic() - started
            listed = len(overview["runs"])
            analysed = sum(run["status"] != "pending" for run in overview["runs"])
            reading = overview.get("reading")
            read = f" (reading: {reading['runs_read']} of {reading['runs_found']} runs read)" if reading else ""
            print(f"  [{triage_mode}] {elapsed:7.1f} s: {listed} runs listed{read}, {analysed} analysed, "
                  f"RSS {sampler.now_main / 2**20:.0f} MiB", flush=True)
            if first_listing is None and listed == JOBS * RANKS:
                first_listing, listing_cpu = elapsed, sampler.cpu_s
            if listed == JOBS * RANKS and analysed == listed:
                first_analysis, analysis_cpu = elapsed, sampler.cpu_s
                break
            if elapsed > timeout_s:
                print(f"  [{triage_mode}] stopped waiting after {timeout_s:.0f} s: {analysed} runs analysed "
                      f"with {sampler.cpu_s:.0f} CPU s", flush=True)
                break
            time.sleep(POLL_S)
        latencies = [_get(runs_url)[1] for _ in range(requests)]
        sampler.stop.set()
        sampler.join()
    latencies.sort()
    jobs = overview["jobs"]
    return {
        "mode": triage_mode,
        "server_up_s": up,
        "first_listing_s": first_listing,
        "first_analysis_s": first_analysis,
        "listing_cpu_s": listing_cpu,
        "analysis_cpu_s": analysis_cpu,
        "analysed": analysed,
        "peak_rss_main_mib": sampler.peak_main / 2**20,
        "peak_rss_tree_mib": sampler.peak_tree / 2**20,
        "overview_p50_ms": 1000 * statistics.median(latencies),
        "overview_p95_ms": 1000 * latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)],
        "overview_bytes": len(body),  # as sent (gzipped when the server gzips)
        "overview_json_bytes": len(json.dumps(overview)),
        "job_status": {job["job"]: job["status"] for job in jobs},
        "job_statuses": dict(Counter(job["status"] for job in jobs)),
        "ranks_by_analysis": dict(Counter(run.get("analysis", "full") for run in overview["runs"])),
        "full_reasons": dict(Counter(run["analysis_reason"] for run in overview["runs"] if "analysis_reason" in run)),
    }


def analysis_cpu() -> dict:
    """CPU seconds of the analysis of the distinct jobs in this process, every rank in full vs
    triage, and whether each job's verdict is the same both ways. CPU time, not wall time: the
    machine may be shared. The logdir's jobs are byte-identical copies of these, so its analysis
    costs `JOBS / TEMPLATE_JOBS` times as much."""
    from tb_health_plugin.analysis import engine, triage
    from tb_health_plugin.readers import LogdirReader

    reader = LogdirReader(CACHE / "templates")
    started = time.process_time()
    reader.refresh()
    read_s = time.process_time() - started
    full_s = triage_s = 0.0
    same, trusted, runs_total = 0, 0, 0
    order = ("no_data", "healthy", "warning", "critical")
    by_job: dict[str, list[str]] = {}
    for name in reader.run_names():
        by_job.setdefault(name.split("/")[0], []).append(name)
    for members in by_job.values():
        runs = [reader.run(name) for name in members]
        started = time.process_time()
        full = engine.analyze_runs(runs, lang=None)
        full_s += time.process_time() - started
        started = time.process_time()
        triaged = triage.analyze_unit(runs, lang=None, triage=True)
        triage_s += time.process_time() - started
        same += max((r["status"] for r in full), key=order.index) == max((r["status"] for r in triaged), key=order.index)
        trusted += sum(r["analysis"] == triage.ONLINE for r in triaged)
        runs_total += len(runs)
    return {"runs": runs_total, "jobs": len(by_job), "read_s": read_s, "full_s": full_s, "triage_s": triage_s,
            "same_verdict": same, "trusted": trusted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="on,off", help="triage modes of the server runs, in order (on, off, auto)")
    parser.add_argument("--requests", type=int, default=200, help="overview requests timed after the load")
    parser.add_argument("--timeout", type=float, default=ANALYSIS_TIMEOUT_S, help="seconds to wait for each first analysis")
    parser.add_argument("--no-cpu", action="store_true", help="skip the in-process CPU comparison")
    args = parser.parse_args()
    print(f"logdir: {JOBS} jobs x {RANKS} ranks, cached in {CACHE}", flush=True)
    target = logdir()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    if not args.no_cpu:
        cpu = analysis_cpu()
        scale = JOBS / cpu["jobs"]
        print(f"\nin-process CPU over the {cpu['jobs']} distinct jobs ({cpu['runs']} runs): read {cpu['read_s']:.1f} s, "
              f"analysis in full {cpu['full_s']:.1f} s ({1000 * cpu['full_s'] / cpu['runs']:.0f} ms a run), "
              f"with triage {cpu['triage_s']:.1f} s ({1000 * cpu['triage_s'] / cpu['runs']:.0f} ms a run, "
              f"{cpu['trusted']} of {cpu['runs']} ranks trusted); for the {JOBS * RANKS} runs: "
              f"{scale * cpu['full_s']:.0f} vs {scale * cpu['triage_s']:.0f} CPU s; "
              f"job verdict the same both ways: {cpu['same_verdict']} of {cpu['jobs']} jobs", flush=True)
    results = []
    for mode in args.modes.split(","):
        results.append(measure(target, mode, args.requests, args.timeout))
        r = results[-1]
        print(f"  [{mode}] overview p50/p95 {r['overview_p50_ms']:.0f}/{r['overview_p95_ms']:.0f} ms, peak RSS "
              f"{r['peak_rss_main_mib']:.0f} MiB ({r['peak_rss_tree_mib']:.0f} with the data server); "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print()
    print("| triage | first listing (server CPU) | all analysed (server CPU) | peak RSS server / with data server "
          "| overview p50 / p95 | overview size | ranks analysed in full |")
    print("|---|---|---|---|---|---|---|")

    def seconds(value, cpu_s):
        return "not within the timeout" if value is None else f"{value:.0f} s ({cpu_s:.0f} CPU s)"

    for r in results:
        print(f"| {r['mode']} | {seconds(r['first_listing_s'], r['listing_cpu_s'])} | "
              f"{seconds(r['first_analysis_s'], r['analysis_cpu_s'])} | "
              f"{r['peak_rss_main_mib']:.0f} / {r['peak_rss_tree_mib']:.0f} MiB | "
              f"{r['overview_p50_ms']:.0f} / {r['overview_p95_ms']:.0f} ms | {r['overview_bytes'] / 2**20:.1f} MiB sent, {r['overview_json_bytes'] / 2**20:.1f} MiB of JSON | "
              f"{r['ranks_by_analysis'].get('full', 0)} of {JOBS * RANKS} |")
    for r in results:
        print(f"  [{r['mode']}] job verdicts: {r['job_statuses']}; why analysed in full: {r['full_reasons']}")
    if len(results) >= 2:
        a, b = results[0], results[-1]
        same = sum(a["job_status"].get(job) == status for job, status in b["job_status"].items())
        print(f"  job verdicts equal between {a['mode']} and {b['mode']}: {same} of {len(b['job_status'])}")


if __name__ == "__main__":
    main()
