"""Peak memory of `tb-health check` on one huge scalar series, and the bytes it costs per point.

    PYTHONPATH=. python bench/bench_memory.py [--points 1000000 5000000] [--workdir DIR] [--trace]
                                              [--before SOURCE_DIR]

Each logdir holds one run with one scalar tag (`train/loss`), one `simple_value` event per step,
as tensorboardX and MindFormers write it (generated once, reused). `tb-health check --format
json` runs as a console command in a fresh child process; its peak resident set size comes from
`resource.getrusage(RUSAGE_CHILDREN)` after it exits (Linux reports kilobytes), so the figure is
what the operating system had to give the whole process: interpreter, numpy, protobuf and data.
The baseline is the same command on a 1,000-point logdir; bytes per point is the growth over
that baseline divided by the extra points. `--trace` also prints the largest Python allocation
sites at the peak (tracemalloc, in-process; slower). `--before DIR` measures, in the same run and
on the same logdirs, the package of another source tree too (e.g. `git worktree add DIR HEAD~1`
or an unpacked `git archive`), so a change's before and after share the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.event_records import write_scalar_events  # noqa: E402

DEFAULT_WORKDIR = Path("/tmp/tb-health-memory-bench")
BASELINE_POINTS = 1_000


def generate(logdir: Path, points: int) -> None:
    """One run, one tag, `points` steps: a decaying noisy loss with one spike."""
    marker = logdir / ".complete"
    if marker.exists():
        return
    folder = logdir / "run"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = np.arange(points)
    loss = 3.0 * np.exp(-x / (points / 4)) + 0.5 + rng.normal(0, 0.02, points)
    loss[points // 3] = 40.0
    started = time.perf_counter()
    write_scalar_events(folder / "events.out.tfevents.1767000000.bench", x, {"train/loss": loss})
    marker.touch()
    print(f"generated {points:,} points in {time.perf_counter() - started:.0f} s", file=sys.stderr)


_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)
"""


def peak_rss_bytes(logdir: Path, source: Path = ROOT) -> tuple[int, float]:
    """Peak RSS of `tb-health check --format json LOGDIR` run alone in a fresh process, and its wall time.

    A small measuring process starts the check, so RUSAGE_CHILDREN covers only that check; the
    package comes from `source`."""
    command = [sys.executable, "-m", "tb_health_plugin.cli", "check", "--format", "json", "--progress", "never",
               str(logdir)]
    env = {**os.environ, "PYTHONPATH": str(source)}
    started = time.perf_counter()
    # in `source` too: `python -m` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, env=env,
                         check=True, cwd=source)
    elapsed = time.perf_counter() - started
    kilobytes, code = out.stdout.split()
    if int(code) not in (0, 1):
        raise RuntimeError(f"tb-health check exited {code}")
    return int(kilobytes) * 1024, elapsed


def trace(logdir: Path) -> None:
    """The largest allocation sites at the peak of an in-process check (tracemalloc)."""
    import tracemalloc

    sys.path.insert(0, str(ROOT))
    from tb_health_plugin.commands.check import check_logdir

    tracemalloc.start(8)
    check_logdir(str(logdir))
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    print(f"tracemalloc: peak {peak / 2**20:.0f} MiB, held after the check {current / 2**20:.0f} MiB")
    for stat in snapshot.statistics("lineno")[:12]:
        print(f"  {stat.size / 2**20:8.1f} MiB  {stat.traceback}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--before", type=Path, help="another source tree to measure as well (before a change)")
    args = parser.parse_args()
    sizes = {}
    for points in [BASELINE_POINTS, *args.points]:
        logdir = args.workdir / f"single-{points}"
        generate(logdir, points)
        sizes[points] = sum(f.stat().st_size for f in (logdir / "run").iterdir())
    sources = {"before": args.before.resolve(), "after": ROOT} if args.before else {"": ROOT}
    for label, source in sources.items():
        base_rss, _ = peak_rss_bytes(args.workdir / f"single-{BASELINE_POINTS}", source)
        print(f"{label + ': ' if label else ''}baseline ({BASELINE_POINTS:,} points): peak RSS "
              f"{base_rss / 2**20:.0f} MiB (interpreter, numpy, protobuf)")
        print(f"{'points':>10} {'file MiB':>9} {'peak RSS MiB':>13} {'bytes/point':>12} {'over baseline':>14} "
              f"{'wall s':>7}")
        for points in args.points:
            rss, elapsed = peak_rss_bytes(args.workdir / f"single-{points}", source)
            per_point = rss / points
            growth = (rss - base_rss) / (points - BASELINE_POINTS)
            print(f"{points:>10,} {sizes[points] / 2**20:>9.0f} {rss / 2**20:>13.0f} {per_point:>12.0f} "
                  f"{growth:>14.0f} {elapsed:>7.1f}", flush=True)
    if args.trace:
        trace(args.workdir / f"single-{args.points[0]}")


if __name__ == "__main__":
    main()
