"""What a re-check costs after 1% more data was appended, against a full check: CLI and plugin.

    PYTHONPATH=. python bench/bench_recheck.py [--runs 100] [--points 4000] [--workdir DIR]

The logdir holds `--runs` runs (8 ranks a job) of four scalar tags with `--points` steps each,
one `simple_value` event per tag and step (100 x 4 x 4000 = 1.6M points by default; generated
once, then copied for each case). Two growths, each appending 1% more steps at the end of the
runs' event files, as a live training does:
  (a) every run grows by 1% of its steps;
  (b) 1% of the runs (at least one) grow by 1% of their steps.

CLI: `tb-health check --format json` run as a console command in a fresh process, its CPU time
(user + system, from `getrusage`: the shared machine's load changes wall times several-fold)
taken uncached on the full logdir, then `--cache DIR` cold (what filling the cache costs)
and warm after each growth. The in-process times (`check_logdir` CPU time, interpreter start and
imports left out) are given too, split into reading (with the cache: restoring, reading the new
bytes, saving) and analysis. Every cached report is compared byte
for byte with an uncached check of the same files.

Plugin: an in-process `HealthService`; its first refresh and analysis of everything, then the
refresh and re-analysis after each growth (`refresh_now` then the background pass's
`_analyse_changed`), reading and analysis timed apart (CPU time of this process).

Times are medians of `--repeats` runs; ratios matter more than seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.event_records import needs_generating, write_scalar_events  # noqa: E402

DEFAULT_WORKDIR = Path("/tmp/tb-health-recheck-bench")
RANKS = 8
STEP_EVERY = 10  # logged every 10th step
GROWTH = 0.01


def series(index: int, steps: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([index, int(steps[0])])
    n = steps.shape[0]
    y = np.log(1.5 + 8.0 * (1 + steps / 2000.0) ** -0.6) + 0.03 * rng.standard_normal(n)
    if index % 5 == 0:
        y[(steps // STEP_EVERY) % 2000 == 1000] += 1.0  # a spike in every fifth run
    return {
        "train/loss": np.exp(y),
        "train/lr": 3e-4 * np.minimum(1.0, steps / 2000.0),
        "train/grad_norm": np.exp(0.3 * rng.standard_normal(n)),
        "train/loss_max": np.exp(y + 0.05),
    }


def event_file(logdir: Path, index: int) -> Path:
    return logdir / f"exp{index // RANKS}" / f"rank_{index % RANKS}" / "events.out.tfevents.1767000000.bench"


def generate(logdir: Path, runs: int, points: int) -> None:
    marker = logdir / f".complete-{runs}x{points}"
    if not needs_generating(logdir, marker):
        return
    for index in range(runs):
        path = event_file(logdir, index)
        path.parent.mkdir(parents=True)
        steps = np.arange(1, points + 1) * STEP_EVERY
        write_scalar_events(path, steps, series(index, steps))
        print(f"\rgenerating {index + 1}/{runs} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    marker.touch()


def grow(logdir: Path, runs: list[int], points: int, steps_so_far: int) -> None:
    """Append `points` more steps to each of `runs`, after their `steps_so_far` steps."""
    for index in runs:
        steps = (np.arange(points) + steps_so_far + 1) * STEP_EVERY
        write_scalar_events(event_file(logdir, index), steps, series(index, steps), append=True)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_check(logdir: Path, cache: Path | None = None) -> tuple[float, bytes]:
    """CPU seconds (user + system) of one `tb-health check` process, and its report."""
    command = [sys.executable, "-m", "tb_health_plugin.cli", "check", "--format", "json", "--progress", "never"]
    if cache is not None:
        command += ["--cache", str(cache)]
    before = _children_cpu_s()
    done = subprocess.run([*command, str(logdir)], capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    spent = _children_cpu_s() - before
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.decode())
    return spent, done.stdout


def in_process_check(logdir: Path, cache: Path | None = None) -> tuple[float, float]:
    """(reading, analysis) CPU seconds of `check_logdir` in this process."""
    from tb_health_plugin.analysis import engine
    from tb_health_plugin.commands import check

    timings = {"analysis": 0.0}
    original = engine.analyze_runs

    def timed(*args, **kwargs):
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            timings["analysis"] += time.process_time() - started

    engine.analyze_runs = timed  # `check` imports it from the engine when it runs
    try:
        started = time.process_time()
        check.check_logdir(str(logdir), cache_dir=None if cache is None else str(cache))
        total = time.process_time() - started
    finally:
        engine.analyze_runs = original
    return total - timings["analysis"], timings["analysis"]


def median_of(repeats: int, measure) -> float:
    return statistics.median(measure() for _ in range(repeats))


def cli_case(base: Path, scratch: Path, grown: list[int], growth_points: int, points: int, repeats: int) -> dict:
    """Times of one growth for the CLI, medians over `repeats` fresh copies."""
    results: dict[str, list[float]] = {"cold": [], "warm": [], "full_after": [], "read": [], "analysis": []}
    identical = True
    for attempt in range(repeats):
        logdir, cache = scratch / f"logdir-{attempt}", scratch / f"cache-{attempt}"
        shutil.copytree(base, logdir)
        cold, cold_report = cli_check(logdir, cache)
        identical &= cold_report == cli_check(logdir)[1]
        results["cold"].append(cold)
        grow(logdir, grown, growth_points, points)
        in_process_cache = scratch / f"cache-inproc-{attempt}"
        shutil.copytree(cache, in_process_cache)
        warm, warm_report = cli_check(logdir, cache)
        full_after, full_report = cli_check(logdir)
        identical &= warm_report == full_report
        results["warm"].append(warm)
        results["full_after"].append(full_after)
        read_s, analysis_s = in_process_check(logdir, in_process_cache)
        results["read"].append(read_s)
        results["analysis"].append(analysis_s)
        shutil.rmtree(logdir)
        shutil.rmtree(cache)
        shutil.rmtree(in_process_cache)
    out = {key: statistics.median(values) for key, values in results.items()}
    out["identical"] = identical
    return out


def cpu_seconds(action) -> float:
    """The CPU time `action()` takes in this process."""
    started = time.process_time()
    action()
    return time.process_time() - started


def service_case(base: Path, scratch: Path, grown: list[int], growth_points: int, points: int) -> dict:
    from tb_health_plugin.service import HealthService

    logdir = scratch / "service-logdir"
    shutil.copytree(base, logdir)
    service = HealthService(str(logdir), refresh_interval_s=3600)
    first_read = cpu_seconds(service.refresh_now)
    first_analysis = cpu_seconds(service._analyse_changed)
    grow(logdir, grown, growth_points, points)
    analysed_before = service.analysis_count
    read = cpu_seconds(service.refresh_now)
    analysis = cpu_seconds(service._analyse_changed)
    units = service.analysis_count - analysed_before
    shutil.rmtree(logdir)
    return {"first_read": first_read, "first_analysis": first_analysis, "read": read, "analysis": analysis,
            "units": units}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args()
    base = args.workdir / "base"
    generate(base, args.runs, args.points)
    growth_points = max(1, round(GROWTH * args.points))
    cases = {
        "(a) every run +1%": list(range(args.runs)),
        "(b) 1% of runs +1%": list(range(max(1, round(GROWTH * args.runs)))),
    }
    print(f"logdir: {args.runs} runs x 4 tags x {args.points} steps = {args.runs * 4 * args.points:,} points; "
          f"+{growth_points} steps per grown run")
    full = median_of(args.repeats, lambda: cli_check(base)[0])
    in_process_check(base)  # the first call imports the readers: not part of a check
    full_read, full_analysis = in_process_check(base)
    print(f"\nCLI, full check (no cache): {full:.2f} CPU s; in process {full_read + full_analysis:.2f} s "
          f"(read {full_read:.2f} s, analysis {full_analysis:.2f} s)")
    print(f"{'case':<22} {'cold cache s':>12} {'re-check s':>11} {'ratio':>7} {'in-process s':>13} "
          f"{'(read':>7} {'analysis)':>10} {'ratio':>7} {'identical':>10}")
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch_dir:
        scratch = Path(scratch_dir)
        for name, grown in cases.items():
            r = cli_case(base, scratch, grown, growth_points, args.points, args.repeats)
            in_process = r["read"] + r["analysis"]
            print(f"{name:<22} {r['cold']:>12.2f} {r['warm']:>11.2f} {r['warm'] / r['full_after']:>7.1%} "
                  f"{in_process:>13.2f} {r['read']:>7.2f} {r['analysis']:>10.2f} "
                  f"{in_process / (full_read + full_analysis):>7.1%} {'yes' if r['identical'] else 'NO':>10}")
        print("\nplugin service refresh (in process)")
        print(f"{'case':<22} {'first read s':>12} {'first analysis s':>17} {'re-read s':>10} {'re-analysis s':>14} "
              f"{'units':>6} {'ratio':>7}")
        for name, grown in cases.items():
            r = service_case(base, scratch, grown, growth_points, args.points)
            first = r["first_read"] + r["first_analysis"]
            print(f"{name:<22} {r['first_read']:>12.2f} {r['first_analysis']:>17.2f} {r['read']:>10.3f} "
                  f"{r['analysis']:>14.3f} {r['units']:>6} {(r['read'] + r['analysis']) / first:>7.1%}")


if __name__ == "__main__":
    main()
