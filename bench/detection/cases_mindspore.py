"""Real MindSpore CPU trainings with injected faults: too high a learning rate from a known step,
a corrupted batch at a known step, and a learning rate far too small; plus healthy runs.

The trainings run in one child process (`bench/detection/ms_training.py`) and are cached by
their spec, so a second benchmark run costs nothing; set `TB_HEALTH_BENCH_CACHE` to move the
cache. Their logs are written with tensorboard's EventFileWriter, the loss every 1 or 5 steps
(last value or mean over the interval), sometimes with our hooks' window maximum.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

from bench.detection.case import Case
from bench.detection.events import write_scalars

ROOT = Path(__file__).resolve().parents[2]
SPLIT_SETTINGS = {
    # seed base, steps, batch, logging intervals tried
    "dev": (100, 400, 32, (1, 5)),
    "holdout": (700, 600, 64, (1, 4)),
}
SCENARIOS = {"healthy": 4, "lr_high": 3, "corrupt": 3, "lr_small": 2}
FAMILY = "mindspore"  # run.py skips this module (and its trainings) when the family is filtered out


def cache_dir() -> Path:
    return Path(os.environ.get("TB_HEALTH_BENCH_CACHE", Path(tempfile.gettempdir()) / "tb-health-bench-ms"))


def specs(split: str) -> list[dict]:
    seed, steps, batch, intervals = SPLIT_SETTINGS[split]
    out = []
    for scenario, count in SCENARIOS.items():
        for k in range(count):
            rng = np.random.default_rng([seed, len(out)])
            spec = {
                "name": f"msloss_{split}_{scenario}_{k}",
                "scenario": scenario,
                "seed": int(seed + len(out)),
                "data_seed": int(seed // 100 + k),
                "steps": steps,
                "batch": batch,
                "lr": float(rng.uniform(0.02, 0.08)),
                "warmup": int(rng.choice([0, steps // 20])),
                "cosine": bool(rng.random() < 0.5),
                "interval": int(rng.choice(intervals)),
                "averaged": bool(rng.random() < 0.5),
                "window_max": bool(rng.random() < 0.5),
            }
            if scenario == "lr_high":
                spec.update(lr_high_from=int(steps * rng.uniform(0.4, 0.7)), lr_factor=float(rng.uniform(30, 80)))
            elif scenario == "corrupt":
                spec.update(corrupt_at=int(steps * rng.uniform(0.3, 0.8)), corrupt_steps=int(rng.integers(1, 3)),
                            corrupt_scale=float(rng.uniform(3, 6)))
                if spec["interval"] > 1:  # one bad step must be visible in what is logged
                    spec["window_max"] = True
            elif scenario == "lr_small":
                spec.update(lr=float(rng.uniform(1e-6, 5e-6)), cosine=False)
            out.append(spec)
    return out


def spec_key(spec: dict) -> str:
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def ensure_trained(all_specs: list[dict]) -> dict[str, Path]:
    """Train the specs missing from the cache in one child process; paths of every result."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = {s["name"]: folder / f"{s['name']}-{spec_key(s)}.npz" for s in all_specs}
    missing = [dict(s, name=paths[s["name"]].stem) for s in all_specs if not paths[s["name"]].exists()]
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(missing, handle)
        print(f"training {len(missing)} MindSpore runs (cached in {folder}) ...", file=sys.stderr, flush=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "bench.detection.ms_training", handle.name, str(folder)],
                       check=True, env=env)
        os.unlink(handle.name)
    return paths


def logged(spec: dict, per_step: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(logged steps, logged loss, window max) for the spec's logging interval and mode."""
    interval = spec["interval"]
    points = per_step.size // interval
    windows = per_step[: points * interval].reshape(points, interval)
    steps = np.arange(1, points + 1) * interval  # MindSpore counts steps from 1
    value = windows.mean(axis=1) if spec["averaged"] else windows[:, -1]
    with np.errstate(invalid="ignore"):
        window_max = windows.max(axis=1)
    return steps, value, window_max


def expected_labels(spec: dict, steps: np.ndarray, loss: np.ndarray) -> dict[str, list[int]]:
    def first_logged(step0: int) -> int:  # step0 counts from 0, logged steps from 1
        return int(steps[np.searchsorted(steps, step0 + 1)])

    labels: dict[str, list[int]] = {}
    if spec["scenario"] == "lr_high":  # the jump of the logged rate is itself a schedule fault
        labels["divergence"] = [first_logged(spec["lr_high_from"])]
        labels["lr_schedule"] = [first_logged(spec["lr_high_from"])]
    elif spec["scenario"] == "corrupt":
        labels["loss_spike"] = [first_logged(spec["corrupt_at"])]
    elif spec["scenario"] == "lr_small":
        labels["stalled_convergence"] = [int(steps[0])]
    bad = ~np.isfinite(loss)
    if bad.any():
        labels["nonfinite"] = [int(steps[np.argmax(bad)])]
        if bad[-1]:  # a run that ends non-finite diverged (README, `divergence`), from the injected fault
            labels.setdefault("divergence", [int(steps[np.argmax(bad)])])
    return labels


def _write(series: dict, folder: Path) -> None:
    write_scalars(folder, series)


def cases(split: str) -> list[Case]:
    all_specs = specs(split)
    paths = ensure_trained(all_specs)
    out = []
    for spec in all_specs:
        result = np.load(paths[spec["name"]])
        steps, loss, window_max = logged(spec, result["loss"])
        lr = result["lr"][steps - 1]
        series = {"train/loss" if spec["window_max"] else "loss": (steps, loss), "train/lr": (steps, lr)}
        if spec["window_max"]:
            series["train/loss_max"] = (steps, window_max)
        out.append(Case(spec["name"], partial(_write, series), expected_labels(spec, steps, loss), family="mindspore"))
    return out
