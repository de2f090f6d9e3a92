"""False spike alarms on synthetic healthy runs: how many runs of pure noise get a spike warning.

    PYTHONPATH=. python bench/bench_spike_null.py [--before TREE] [--runs 400] [--families ...]
        [--detector spikes|divergence]

The zoo's healthy runs are few (50-60 a split) and their noise is whatever the trainings gave;
this benchmark asks the spike detector the null question directly, many times: a falling loss
curve times per-step noise of a known law, logged every step, as interval means of 10 steps or
as window maxima of 10 steps, at 40 to 5,000 logged points, and counts the runs with any
`loss_spike` warning (`runs` of them per family and size, each from a fixed seed, so two trees
see the same runs). Families:
- `gauss`, `t5`, `t3`, `t2`: i.i.d. log-noise of scale 0.1 (Gaussian sd, or Student-t scale);
- `ar05`: Gaussian AR(1) log-noise, lag-1 correlation 0.5;
- `mean10_t3`, `max10_gauss`, `max10_t3`: the mean or the maximum of 10 steps of such noise;
- `hard`: `converged_classifier`, the law the spike tests use too (0.5
  Gaussian log-noise; from step 150 on, 5% hard batches 10-40x above the trend). At 300
  points its batches come early, where the trend is still high, and add up to 1.8 times the
  starting loss, many of them more than half of it, the zoo label's size of a spike: no clean
  null there.
The other families are healthy by construction: no alarm is right. Heavy tails (t2, t3) make
fourfold jumps routine, which the detector's gross-jump rule (`spikes` step 7) calls spikes by
design, so those families count many. `--before TREE` runs the same runs against another
checkout of the package (e.g. the previous commit's) in a child process, and prints both.
`--detector divergence` asks the divergence detector the same question (warnings and critical
findings of `loss_divergence` on the same runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("gauss", "t5", "t3", "t2", "ar05", "mean10_t3", "max10_gauss", "max10_t3", "hard")
SIZES = (40, 100, 300, 1000, 5000)
SCALE = 0.1


def curve(points: int) -> np.ndarray:
    """The log of a loss falling from 3.6 to about 0.6 (a power law, as the spike tests use)."""
    t = np.arange(points, dtype=np.float64)
    return np.log(0.6 + 3.0 * (1 + t / (0.02 * points)) ** -0.8)


def noise(law: str, points: int, rng: np.random.Generator) -> np.ndarray:
    if law == "gauss":
        return SCALE * rng.standard_normal(points)
    if law in ("t5", "t3", "t2"):
        return SCALE * rng.standard_t(float(law[1:]), points)
    if law == "ar05":
        shocks = SCALE * rng.standard_normal(points)
        out = np.empty(points)
        out[0] = shocks[0]
        for i in range(1, points):
            out[i] = 0.5 * out[i - 1] + shocks[i]
        return out
    raise ValueError(law)


def converged_classifier(points: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(steps, per-step loss) of a classifier that converges from ln 8 towards 0.003: log-normal
    minibatch noise, and once converged 5% hard batches at 10-40x the trend (0.03-0.1, as real
    zoo trainings show next to a trend of 0.002-0.01). The `hard` family, and the tests' law."""
    steps = np.arange(1, points + 1)
    y = np.log(0.003 + 2.1 * (1 + steps / 8.0) ** -1.6) + 0.5 * rng.standard_normal(points)
    hard = (rng.random(points) < 0.05) & (steps > 150)
    y[hard] += np.log(rng.uniform(10, 40, hard.sum()))
    return steps, np.exp(y)


def healthy_run(family: str, points: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(steps, logged loss) of one healthy run of `family`."""
    if family == "hard":
        return converged_classifier(points, rng)
    if family.startswith(("mean10_", "max10_")):
        per_step = np.exp(curve(10 * points) + noise(family.split("_")[1], 10 * points, rng)).reshape(points, 10)
        logged = per_step.mean(axis=1) if family.startswith("mean") else per_step.max(axis=1)
        return np.arange(1, points + 1) * 10, logged
    return np.arange(1, points + 1), np.exp(curve(points) + noise(family, points, rng))


def count_alarmed(families: list[str], runs: int, detector: str = "spikes",
                  sizes: tuple[int, ...] = SIZES) -> dict[str, dict[int, int]]:
    """Runs with an alarm of `detector`, per family and size, with the package importable here."""
    from tb_health_plugin.analysis.detectors.divergence import loss_divergence
    from tb_health_plugin.analysis.detectors.schedule import infer_schedule
    from tb_health_plugin.analysis.detectors.spikes import loss_spikes

    detect = loss_spikes if detector == "spikes" else loss_divergence

    counts: dict[str, dict[int, int]] = {}
    for family in families:
        counts[family] = {}
        for points in sizes:
            rng = np.random.default_rng(zlib.crc32(f"{family}{points}".encode()))
            alarmed = 0
            for _ in range(runs):
                steps, loss = healthy_run(family, points, rng)
                found = detect(steps, loss, "loss", infer_schedule(steps))
                alarmed += any(f.severity in ("warning", "critical") for f in found)
            counts[family][points] = alarmed
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per family and size")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--before", type=Path, help="another checkout of the package to compare")
    parser.add_argument("--detector", choices=("spikes", "divergence"), default="spikes")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES), help="logged points per run")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the child's output
    args = parser.parse_args()
    if args.json:
        print(json.dumps(count_alarmed(args.families, args.runs, args.detector, tuple(args.sizes))))
        return
    columns = {"this tree": _counts_in(ROOT, args)}
    if args.before:
        columns["before"] = _counts_in(args.before.resolve(), args)
    names = list(columns)
    print(f"runs with a {args.detector} alarm, of {args.runs} healthy runs per family and size")
    print(f"{'family':12s} {'points':>6s} " + " ".join(f"{n:>10s}" for n in names))
    totals = dict.fromkeys(names, 0)
    for family in args.families:
        for points in args.sizes:
            row = [columns[n][family][str(points)] for n in names]
            for n, value in zip(names, row, strict=True):
                totals[n] += value
            print(f"{family:12s} {points:6d} " + " ".join(f"{v:10d}" for v in row))
    runs = len(args.families) * len(args.sizes) * args.runs
    print(f"{'total':12s} {runs:6d} " + " ".join(f"{totals[n]:10d}" for n in names))


def _counts_in(tree: Path, args: argparse.Namespace) -> dict:
    """The counts with `tree`'s package, in a child process (both trees see the same runs)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--json", "--runs", str(args.runs),
               "--detector", args.detector, "--families", *args.families,
               "--sizes", *map(str, args.sizes)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tree, env=env)
    return json.loads(done.stdout)


if __name__ == "__main__":
    main()
