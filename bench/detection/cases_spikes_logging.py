"""Loss spikes under the logging styles users reported: interval means and noisy per-step values.

Every run is simulated step by step (a power-law curve in log space, per-step minibatch noise,
Gaussian or Student-t) and then logged the way its trainer logs:

- `mean50`: the Hugging Face way, each logged point the mean loss of the last `MEAN_INTERVALS`
  steps (50 in dev). Spiked runs hold 3 spikes; each spike is a per-step jump decaying back
  e-fold over 0.5-2 logging intervals, sized so that it lifts the logged mean by 35-60% at its
  highest point (it then stays lifted for several points);
- `noisy`: the last step's loss every 5 or 10 steps, per-step noise sigma 0.08-0.2 in log-loss.
  Spiked runs hold 3 spikes of one size (+35-60%, a plateau of w logged points): the second and
  third as large as the first. A labelled spike is one that noise cannot explain: its summed
  evidence size * sqrt(w) / sigma is at least `MIN_EVIDENCE_SIGMAS` (so w grows with the noise,
  up to 6 points); a one-point +35% bump in noise of sigma 0.15 is not a detectable spike;
- `hooks`: our hooks' tags: `train/loss` (the last step) and `train/loss_max` (the window
  maximum) every 10 steps of a short, noisy run (small models: per-step losses that scatter by
  20-50%, heavy tails), healthy only: a window maximum 2-3x above the loss trend is what the
  maximum of ten such steps normally reaches.

Healthy runs of every style (no spike) must raise no warning. "dev" and "holdout" differ in
seeds, and the holdout logs interval means every 25 or 100 steps and noisy values every 4 or 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from bench.detection.case import Case, seeded_cases
from bench.detection.events import write_scalars

MIN_EVIDENCE_SIGMAS = 8.0  # a labelled plateau spike: size * sqrt(width) / sigma, see the module doc
SPIKES_PER_RUN = 3


@dataclass(frozen=True)
class Shape:
    seed: int
    mean_intervals: tuple[int, ...]
    noisy_intervals: tuple[int, ...]
    counts: dict[str, int]


SPLITS = {
    "dev": Shape(seed=4100, mean_intervals=(50,), noisy_intervals=(5, 10),
                 counts={"mean50_spikes": 16, "mean50_healthy": 16, "noisy_spikes": 16, "noisy_healthy": 16,
                         "hooks_healthy": 16}),
    "holdout": Shape(seed=8100, mean_intervals=(25, 100), noisy_intervals=(4, 8),
                     counts={"mean50_spikes": 16, "mean50_healthy": 16, "noisy_spikes": 16, "noisy_healthy": 16,
                             "hooks_healthy": 16}),
}


def cases(split: str) -> list[Case]:
    shape = SPLITS[split]

    def simulate_case(scenario: str, rng: np.random.Generator):
        series, expected = SIMULATORS[scenario.rsplit("_", 1)[0]](rng, shape, scenario.endswith("spikes"))
        return partial(_write, series), expected

    return seeded_cases(shape, f"spl_{split}", simulate_case)


def _write(series: dict, folder: Path) -> None:
    write_scalars(folder, series)


def healthy_curve(rng: np.random.Generator, total: int) -> np.ndarray:
    """Per-step log-loss: a power law towards a floor (no noise)."""
    t = np.arange(total, dtype=np.float64)
    start = rng.uniform(2.0, 8.0)
    floor = start * rng.uniform(0.05, 0.3)
    tau = total * rng.uniform(0.005, 0.05)
    return np.log(floor + (start - floor) * (1 + t / tau) ** -rng.uniform(0.5, 1.2))


def step_noise(rng: np.random.Generator, total: int, sigma: float) -> np.ndarray:
    """Per-step noise in log-loss: Gaussian, or Student-t (nu 4-8) scaled to sd sigma."""
    if rng.random() < 0.4:
        nu = float(rng.uniform(4.0, 8.0))
        return sigma * rng.standard_t(nu, total) / np.sqrt(nu / (nu - 2))
    return sigma * rng.standard_normal(total)


def spike_slots(rng: np.random.Generator, points: int, gap: int) -> np.ndarray:
    """Logged-point indices of `SPIKES_PER_RUN` spike starts, after warm-up, `gap` points apart at least."""
    while True:
        slots = np.sort(rng.integers(int(0.15 * points), int(0.9 * points), SPIKES_PER_RUN))
        if np.all(np.diff(slots) >= gap):
            return slots


def simulate_mean50(rng: np.random.Generator, shape: Shape, spiked: bool):
    interval = int(rng.choice(shape.mean_intervals))
    points = int(rng.integers(200, 800))
    total = points * interval
    y = healthy_curve(rng, total)
    sigma = rng.uniform(0.05, 0.3)
    noise = step_noise(rng, total, sigma)
    expected = {}
    if spiked:
        starts = []
        for slot in spike_slots(rng, points, gap=40):
            start = int(slot * interval + rng.integers(0, interval))
            hold = rng.uniform(1.5, 4.0) * interval  # the jump lasts this many steps, then decays
            lift = rng.uniform(1.35, 1.6)
            y += _mean_lift_bump(y, start, hold, lift, interval)
            starts.append(start)
        logged_steps = np.arange(interval, total + 1, interval) - 1
        expected["loss_spike"] = [int(logged_steps[np.searchsorted(logged_steps, s)]) for s in starts]
    per_step = np.exp(y + noise)
    logged = per_step.reshape(points, interval).mean(axis=1)
    steps = np.arange(1, points + 1) * interval  # a trainer counts steps from 1
    if spiked:
        expected["loss_spike"] = [s + 1 for s in expected["loss_spike"]]
    return {"loss": (steps, logged), "learning_rate": (steps, np.full(points, 3e-4))}, expected


def _mean_lift_bump(y: np.ndarray, start: int, hold: float, lift: float, interval: int) -> np.ndarray:
    """A per-step jump at `start` held for `hold` steps, then decaying e-fold every half interval,
    whose largest lift of an interval mean of the noise-free curve is `lift` (found by bisection
    on its log-size)."""
    t = np.arange(y.size, dtype=np.float64)
    after = t - start - hold
    shape = np.where(t < start, 0.0, np.where(after <= 0, 1.0, np.exp(-np.maximum(after, 0) / (0.5 * interval))))
    shape[after > 4 * interval] = 0.0
    base = np.exp(y).reshape(-1, interval).mean(axis=1)

    def peak_lift(size: float) -> float:
        return float(np.max(np.exp(y + size * shape).reshape(-1, interval).mean(axis=1) / base))

    low, high = 0.0, 5.0
    for _ in range(50):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if peak_lift(middle) < lift else (low, middle)
    return 0.5 * (low + high) * shape


def simulate_noisy(rng: np.random.Generator, shape: Shape, spiked: bool):
    interval = int(rng.choice(shape.noisy_intervals))
    points = int(rng.integers(150, 1500))
    total = points * interval
    y = healthy_curve(rng, total)
    sigma = rng.uniform(0.08, 0.2)
    expected = {}
    steps = np.arange(1, points + 1) * interval
    if spiked:
        size = float(np.log(rng.uniform(1.35, 1.6)))
        width = int(np.clip(np.ceil((MIN_EVIDENCE_SIGMAS * sigma / size) ** 2), 1, 6))
        sigma = min(sigma, size * np.sqrt(width) / MIN_EVIDENCE_SIGMAS)  # keep the spike detectable
        labels = []
        for slot in spike_slots(rng, points, gap=30):
            last_step = slot * interval + interval - 1  # 0-based step logged as point `slot`
            begin = last_step - int(rng.integers(0, interval))
            y[begin : last_step + (width - 1) * interval + 1] += size  # a plateau over `width` points
            labels.append(int(steps[slot]))
        expected["loss_spike"] = labels
    noise = step_noise(rng, total, sigma)
    per_step = np.exp(y + noise)
    logged = per_step.reshape(points, interval)[:, -1]
    return {"train_loss": (steps, logged), "lr": (steps, np.full(points, 1e-3))}, expected


def simulate_hooks(rng: np.random.Generator, shape: Shape, spiked: bool):
    interval = 10
    points = int(rng.integers(20, 300))
    total = points * interval
    y = healthy_curve(rng, total)
    sigma = rng.uniform(0.15, 0.4)
    nu = float(rng.choice([3.0, 5.0, np.inf]))
    noise = sigma * (rng.standard_t(nu, total) if np.isfinite(nu) else rng.standard_normal(total))
    per_step = np.exp(y + noise).reshape(points, interval)
    steps = np.arange(1, points + 1) * interval
    return {
        "train/loss": (steps, per_step[:, -1]),
        "train/loss_max": (steps, per_step.max(axis=1)),
        "train/loss_min": (steps, per_step.min(axis=1)),
        "train/lr": (steps, np.full(points, 1e-3)),
    }, {}


SIMULATORS = {"mean50": simulate_mean50, "noisy": simulate_noisy, "hooks": simulate_hooks}
