"""`tb-health check` against `losslint check` on one big logdir, side by side in one run.

    PYTHONPATH=. python bench/bench_check_speed.py [--runs 100] [--points 4250] [--logdir DIR]

The logdir holds `--runs` runs of four scalar tags (loss, learning rate, gradient norm, the
loss window maximum) with `--points` steps each, one value per event as tensorboardX and
MindFormers write them: 100 x 4 x 4250 = 1.7M scalar events by default. It is generated once
(about a minute) and reused. Both tools run as the console commands a user would type, each
in a fresh process, timed on the wall clock; tb-health runs three times around losslint and
its median is quoted, so a busy machine hurts both alike. Then the analysis alone is timed on
the same runs cut to 1/4, 1/2 and all of their points, to show it grows linearly.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.detection.events import write_scalars  # noqa: E402
from bench.event_records import needs_generating  # noqa: E402

DEFAULT_LOGDIR = Path("/tmp/tb-health-speed-logdir")


def generate(logdir: Path, runs: int, points: int) -> None:
    marker = logdir / f".complete-{runs}x{points}"
    if not needs_generating(logdir, marker):
        return
    started = time.perf_counter()
    for index in range(runs):
        rng = np.random.default_rng(index)
        steps = np.arange(1, points + 1) * 10
        y = np.log(1.5 + 8.0 * (1 + steps / 2000.0) ** -0.6) + 0.03 * rng.standard_normal(points)
        if index % 5 == 0:
            y[points // 2] += 1.0  # a spike in every fifth run
        lr = 3e-4 * np.minimum(1.0, steps / 2000.0) * (0.55 + 0.45 * np.cos(np.pi * steps / steps[-1]))
        grad = np.exp(0.3 * rng.standard_normal(points))
        folder = logdir / f"exp{index // 8}" / f"rank_{index % 8}"
        write_scalars(
            folder,
            {
                "train/loss": (steps, np.exp(y)),
                "train/lr": (steps, lr),
                "train/grad_norm": (steps, grad),
                "train/loss_max": (steps, np.exp(y + 0.05)),
            },
        )
        print(f"\rgenerating {index + 1}/{runs} runs", end="", file=sys.stderr, flush=True)
    marker.touch()
    print(f"\ngenerated {runs * points * 4:,} scalar events in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def wall_seconds(command: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                            env={"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent)})
    return time.perf_counter() - started, result.returncode


def analysis_scaling(logdir: Path) -> list[tuple[int, float]]:
    from tb_health_plugin.analysis.engine import analyze_runs
    from tb_health_plugin.readers import read_logdir
    from tb_health_plugin.run_data import RunData, ScalarSeries

    runs = read_logdir(logdir)
    rows = []
    for share in (0.25, 0.5, 1.0):
        cut = []
        for run in runs:
            scalars = {}
            for tag, series in run.scalars.items():
                keep = max(1, int(len(series) * share))
                scalars[tag] = ScalarSeries(series.steps[:keep], series.wall_times[:keep], series.values[:keep])
            cut.append(RunData(run.name, scalars))
        points = sum(len(s) for r in cut for s in r.scalars.values())
        started = time.perf_counter()
        analyze_runs(cut)
        rows.append((points, time.perf_counter() - started))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=4250, help="steps per run (four tags each)")
    parser.add_argument("--logdir", type=Path, default=DEFAULT_LOGDIR)
    parser.add_argument("--skip-losslint", action="store_true")
    args = parser.parse_args()
    generate(args.logdir, args.runs, args.points)
    python = sys.executable
    ours = [python, "-m", "tb_health_plugin.cli", "check", str(args.logdir), "--format", "json"]
    theirs = [str(Path(python).parent / "losslint"), "check", str(args.logdir), "--format", "json"]
    timings = [wall_seconds(ours)]
    if not args.skip_losslint:
        losslint_seconds, losslint_code = wall_seconds(theirs)
    timings += [wall_seconds(ours), wall_seconds(ours)]
    ours_seconds = statistics.median(t for t, _ in timings)
    events = args.runs * args.points * 4
    print(f"logdir: {args.runs} runs, {events:,} scalar events ({args.logdir})")
    print(f"tb-health check : {ours_seconds:7.2f} s (median of {', '.join(f'{t:.2f}' for t, _ in timings)}; "
          f"exit {timings[0][1]})")
    if not args.skip_losslint:
        print(f"losslint check  : {losslint_seconds:7.2f} s (exit {losslint_code})")
        print(f"ratio           : tb-health takes 1/{losslint_seconds / ours_seconds:.1f} of losslint's time "
              f"(target: 1/20 or less)")
    print("\nanalysis alone (engine on runs already read), growing the points per run:")
    rows = analysis_scaling(args.logdir)
    base_points, base_seconds = rows[0]
    for points, seconds in rows:
        print(f"  {points:>10,} points  {seconds:6.2f} s  {1e6 * seconds / points:6.2f} us/point  "
              f"x{seconds / base_seconds:.2f} time for x{points / base_points:.1f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
