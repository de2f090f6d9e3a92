"""Synthetic loss curves with injected faults at known steps, and benign traps that must not alarm.

Every run is simulated step by step (a power-law loss curve in log space, a learning-rate
schedule, per-step minibatch noise) and then logged the way trainers log: every N steps, either
the last step's loss or the mean over the interval, under one of the tag spellings
`tb_health_plugin/roles.py` recognises. Faults are injected into the per-step curve:

- loss_spike: 1-3 sudden jumps of x1.5-x8, lasting 1-5 logged intervals (1 step when the run
  also logs our hooks' `train/loss_max`), decaying back;
- divergence: an exponential blow-up or a steady rise from a known step (some end in NaN); a
  steady rise ("ramp", 1.6-4x in log-linear steps over the rest of the run from 30-70% of it)
  is a slow creep, scored by its onset delay as a share of the run;
- nonfinite: NaN from a known step to the end, or one transient NaN;
- stalled_convergence: the loss freezes mid-run at a high learning rate, or never moves;
- overfitting: the eval loss turns upward while the training loss keeps falling.

Benign traps mixed into every run at random: warm-up bumps and large early losses, heavy-tailed
(Student-t) noise, epoch-boundary sawtooth, learning-rate decay drops (step and cosine
schedules with their anneal drop), interval-averaged logging and coarse logging intervals.

"dev" and "holdout" differ in seeds, run lengths, logging intervals, noise levels and tails.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from bench.detection.case import Case, seeded_cases
from bench.detection.events import write_scalars

BLOWUP_MAX_LOG = float(np.log(1e4))  # a blown-up loss levels off 10^4 above its curve (fp32-safe)
LOSS_SPELLINGS = (("train/loss", "train/lr"), ("loss", "learning_rate"), ("lm-loss", "learning-rate"),
                  ("train_loss", "lr"), ("Loss/train", "train/learning_rate"))


@dataclass(frozen=True)
class SplitShape:
    seed: int
    points: tuple[int, int]  # logged points per run
    intervals: tuple[int, ...]  # logging intervals, steps
    noise: tuple[float, float]  # per-step noise sigma in log-loss
    heavy_nu: tuple[float, ...]  # Student-t degrees of freedom of heavy-tailed runs
    counts: dict[str, int]


SPLITS = {
    "dev": SplitShape(
        seed=1000,
        points=(150, 3000),
        intervals=(1, 10, 50, 100),
        noise=(0.01, 0.06),
        heavy_nu=(4.0, 8.0),
        counts={"healthy": 70, "spike": 30, "blowup": 14, "ramp": 8, "nan": 10, "transient_nan": 5,
                "stall": 14, "stuck": 8, "overfit": 12},
    ),
    "holdout": SplitShape(
        seed=9000,
        points=(120, 6000),
        intervals=(1, 5, 20, 200),
        noise=(0.005, 0.08),
        heavy_nu=(5.0, 10.0),
        counts={"healthy": 80, "spike": 30, "blowup": 14, "ramp": 8, "nan": 10, "transient_nan": 5,
                "stall": 14, "stuck": 8, "overfit": 12},
    ),
}


def cases(split: str) -> list[Case]:
    """The split's cases; the steady rises ("ramp") are marked slow creeps, with their length in
    steps, so that the benchmark scores their onset delay as a share of the run."""
    shape = SPLITS[split]
    lengths: list[int] = []

    def simulate_case(scenario: str, rng: np.random.Generator):
        run = simulate(scenario, rng, shape)
        lengths.append(run.steps)
        return partial(_write, run), run.expected

    drawn = seeded_cases(shape, f"syn_{split}", simulate_case)
    return [replace(case, creep="_ramp_" in case.name, steps=steps) for case, steps in zip(drawn, lengths, strict=True)]


@dataclass
class SimulatedRun:
    series: dict[str, tuple[np.ndarray, np.ndarray]]
    expected: dict[str, list[int]]
    steps: int = 0  # the run's length in steps


def _write(run: SimulatedRun, folder: Path) -> None:
    write_scalars(folder, run.series)


def lr_schedule(rng: np.random.Generator, t: np.ndarray, kind: str, warmup: int) -> np.ndarray:
    total = t[-1] + 1
    peak = 10 ** rng.uniform(-4.5, -2.5)
    ramp = np.minimum(1.0, (t + 1) / max(warmup, 1))
    progress = np.clip((t - warmup) / max(total - warmup, 1), 0, 1)
    if kind == "cosine":
        shape = 0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * progress))
    elif kind == "linear":
        shape = 1 - 0.95 * progress
    elif kind == "step":
        shape = np.where(progress < 0.5, 1.0, np.where(progress < 0.75, 0.1, 0.01))
    else:
        shape = np.ones_like(progress)
    return peak * ramp * shape


def simulate(scenario: str, rng: np.random.Generator, shape: SplitShape) -> SimulatedRun:
    interval = int(rng.choice(shape.intervals))
    points = int(rng.integers(*shape.points))
    total = points * interval
    t = np.arange(total, dtype=np.float64)
    averaged = bool(rng.random() < 0.4) and interval > 1
    hooks_style = bool(rng.random() < 0.35)
    spelling = LOSS_SPELLINGS[0] if hooks_style else LOSS_SPELLINGS[int(rng.integers(len(LOSS_SPELLINGS)))]
    log_lr = hooks_style or rng.random() < 0.6
    stall_like = scenario in ("stall", "stuck")
    kind = "constant" if stall_like else str(rng.choice(["cosine", "linear", "step", "constant"], p=[0.4, 0.2, 0.2, 0.2]))
    warmup = int(total * rng.uniform(0.0, 0.08))
    lr = lr_schedule(rng, t, kind, warmup)

    # Healthy curve in log space: power law towards a floor, the anneal drop, warm-up bump.
    start_loss = rng.uniform(2.0, 11.0)
    floor = start_loss * rng.uniform(0.05, 0.3)
    tau = total * rng.uniform(0.005, 0.05)
    b = rng.uniform(0.5, 1.2)
    y = np.log(floor + (start_loss - floor) * (1 + t / tau) ** -b)
    y -= rng.uniform(0.0, 0.15) * (1 - lr / lr.max())
    if rng.random() < 0.4 and warmup > 10:
        y += rng.uniform(0.05, 0.4) * np.sin(np.pi * np.clip(t / (1.5 * warmup), 0, 1))
    if rng.random() < 0.3:  # epoch boundaries: a drop at each epoch start, creeping back
        epochs = int(rng.integers(3, 9))
        phase = (t * epochs / total) % 1.0
        y += rng.uniform(0.01, 0.06) * (phase - 0.5)
    sigma = rng.uniform(*shape.noise)
    heavy = rng.random() < 0.35
    nu = float(rng.choice(shape.heavy_nu)) if heavy else np.inf
    noise = rng.standard_t(nu, total) if heavy else rng.standard_normal(total)
    expected: dict[str, list[int]] = {}
    logged_steps = np.arange(interval, total + 1, interval) - 1  # the last step of each window

    def first_logged(step: float) -> int:
        return int(logged_steps[np.searchsorted(logged_steps, step)])

    if scenario == "spike":
        spikes = []
        count = int(rng.integers(1, 4))
        slots = np.sort(rng.choice(np.arange(3, 18), size=count, replace=False)) / 20.0  # after warm-up
        for slot in slots:
            width_points = int(rng.integers(1, 6))
            duration = 1 if (hooks_style and rng.random() < 0.4) else width_points * interval
            start = int(slot * total) + int(rng.integers(0, interval))
            # A labelled spike is one noise cannot explain: at least x1.5 and 10 noise standard
            # deviations of one step (t noise with nu degrees of freedom has sd sqrt(nu/(nu-2))).
            noise_sd = sigma * (np.sqrt(nu / (nu - 2)) if heavy else 1.0)
            size = max(np.log(rng.uniform(1.5, 8.0)), 10 * noise_sd)
            k = np.arange(duration)
            y[start : start + duration] += size * np.exp(-2.0 * k / max(duration, 1))
            spikes.append(first_logged(start))
        expected["loss_spike"] = spikes
    elif scenario in ("blowup", "nan"):
        onset = int(total * rng.uniform(0.3, 0.85))
        rate = rng.uniform(0.1, 0.6) / interval  # per step: the loss grows e-fold in 2-10 logged points
        after = np.clip(t - onset, 0, None)
        y += np.where(t >= onset, np.minimum(np.expm1(rate * np.minimum(after, 60 / rate)) * rng.uniform(0.05, 0.3), BLOWUP_MAX_LOG), 0.0)
        expected["divergence"] = [first_logged(onset)]
        if scenario == "nan":
            nan_from = onset + int(rng.integers(3, 12)) * interval if rng.random() < 0.6 else onset
            y[nan_from:] = np.nan
            expected["divergence"] = [first_logged(onset)]
            expected["nonfinite"] = [first_logged(nan_from)]
    elif scenario == "ramp":
        onset = int(total * rng.uniform(0.3, 0.7))
        rise = np.log(rng.uniform(1.6, 4.0))
        y += np.where(t >= onset, rise * (t - onset) / (total - onset), 0.0)
        expected["divergence"] = [first_logged(onset)]
    elif scenario == "transient_nan":
        at = int(total * rng.uniform(0.2, 0.9))
        logged = first_logged(at)
        y[logged] = np.nan
        expected["nonfinite"] = [logged]
    elif scenario == "stall":
        at = int(total * rng.uniform(0.2, 0.5))
        y[at:] = y[at]
        expected["stalled_convergence"] = [first_logged(at)]
    elif scenario == "stuck":
        y = np.full(total, np.log(start_loss)) - 0.02 * (1 - np.exp(-t / max(tau, 1)))
        expected["stalled_convergence"] = [int(logged_steps[0])]

    per_step = np.exp(y + sigma * noise)
    if averaged:
        windows = per_step.reshape(points, interval)
        logged = windows.mean(axis=1)
    else:
        logged = per_step[logged_steps]
    loss_tag, lr_tag = spelling
    series = {loss_tag: (logged_steps, logged)}
    if log_lr:
        series[lr_tag] = (logged_steps, lr[logged_steps])
    if hooks_style:
        series["train/loss_max"] = (logged_steps, per_step.reshape(points, interval).max(axis=1))
    if scenario == "overfit" or rng.random() < 0.3:
        series.update(_eval_series(rng, scenario, t, y, logged_steps, expected))
    return SimulatedRun(series, expected, total)


def _eval_series(rng, scenario, t, y, logged_steps, expected) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Eval loss every E steps: the train curve plus a generalisation gap, turning up if overfitting."""
    evals = int(rng.integers(10, 31))
    eval_steps = np.unique(logged_steps[np.linspace(0, logged_steps.size - 1, evals + 1).astype(int)[1:]])
    clean = np.interp(eval_steps, t, np.nan_to_num(y, nan=float(np.nanmax(y))))
    gap = rng.uniform(0.02, 0.3)
    e = clean + gap
    if scenario == "overfit":
        turn = int(eval_steps.size * rng.uniform(0.35, 0.7))
        growth = np.log(rng.uniform(1.15, 1.8))
        after = np.clip(np.arange(eval_steps.size) - turn, 0, None)
        e = e + growth * after / max(after.max(), 1) + (clean[turn] - clean) * (after > 0)
        expected["overfitting"] = [int(eval_steps[turn])]
    e = e + rng.normal(0, rng.uniform(0.002, 0.01), eval_steps.size)
    return {"eval/loss": (eval_steps, np.exp(e))}
