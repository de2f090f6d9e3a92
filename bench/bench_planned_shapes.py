"""Planned learning-rate shapes and dynamic loss-scale searches against the detectors.

    PYTHONPATH=. python bench/bench_planned_shapes.py

Prints, per case and logging interval, whether `analyze_lr` raised an alarm (planned shapes
must not, faults must), then how many of 200 simulated healthy dynamic loss scalers (initial
scale 2^16..2^32, windows of 1000-2000 steps, runs of 1500-6000 steps, gradient noise 0.2-1.0
in log) `analyze_loss_scale` alarms on. Shapes follow PyTorch's definitions
(CosineAnnealingWarmRestarts, CyclicLR triangular/triangular2, OneCycleLR's cosine).
"""

from __future__ import annotations

import numpy as np

from bench.detection.cases_signals import dynamic_loss_scaler
from tb_health_plugin.analysis.detectors.loss_scale import analyze_loss_scale
from tb_health_plugin.analysis.detectors.lr_fit import analyze_lr


def sgdr(total: int, t_0: int, t_mult: int, peak=1e-3, floor=1e-5, warm=0) -> np.ndarray:
    lr, t_cur, t_i = [], 0, t_0
    for _ in range(total):
        lr.append(floor + (peak - floor) * (1 + np.cos(np.pi * t_cur / t_i)) / 2)
        t_cur += 1
        if t_cur >= t_i:
            t_cur, t_i = 0, t_i * t_mult
    out = np.array(lr)
    if warm:
        out[:warm] = peak * (np.arange(warm) + 1) / warm
    return out


def cyclic(total: int, half: int, halve: bool, base=1e-4, top=1e-3) -> np.ndarray:
    t = np.arange(total)
    cycle = t // (2 * half)
    amplitude = (top - base) * np.maximum(0, 1 - np.abs(t / half - 2 * cycle - 1))
    return base + (amplitude / 2.0**cycle if halve else amplitude)


def one_cycle(total: int, peak=1e-2) -> np.ndarray:
    up, t = int(0.3 * total), np.arange(total)
    rise = peak / 25 + (peak - peak / 25) * 0.5 * (1 - np.cos(np.pi * t / up))
    fall = peak / 1e4 + (peak - peak / 1e4) * 0.5 * (1 + np.cos(np.pi * (t - up) / (total - up)))
    return np.where(t < up, rise, fall)


def lr_cases() -> dict[str, tuple[np.ndarray, bool]]:
    """name -> (rate per step, is a fault)."""
    base = sgdr(6000, 6000, 1, warm=100)  # warm-up then one cosine over the run
    replay, to_peak, jump, nan, irregular = (base.copy() for _ in range(5))
    replay[3000:] = base[:3000]
    to_peak[2500:] = base[100:3600]
    jump[4000:] *= 3
    nan[3000:] = np.nan
    irregular[2000:] = base[100:4100]
    irregular[4500:] = base[100:1600]
    return {
        "sgdr T_0=200 T_mult=2": (sgdr(6000, 200, 2), False),
        "sgdr T_0=500 T_mult=2": (sgdr(6000, 500, 2), False),
        "sgdr T_0=1500 T_mult=2": (sgdr(6000, 1500, 2), False),
        "sgdr T_0=300 T_mult=3": (sgdr(10000, 300, 3), False),
        "sgdr T_0=1000": (sgdr(6000, 1000, 1), False),
        "sgdr T_0=500 T_mult=2, warm-up": (sgdr(8000, 500, 2, warm=100), False),
        "triangular, 500-step half cycles": (cyclic(6000, 500, False), False),
        "triangular2, 500-step half cycles": (cyclic(6000, 500, True), False),
        "triangular, 2 cycles only": (cyclic(6000, 1500, False), False),
        "one-cycle": (one_cycle(6000), False),
        "warm-up + cosine": (base, False),
        "fault: scheduler replayed from step 0": (replay, True),
        "fault: reset to the peak mid-run": (to_peak, True),
        "fault: 3x jump": (jump, True),
        "fault: NaN": (nan, True),
        "fault: two irregular resets": (irregular, True),
    }


def healthy_scaler(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    total, window = int(rng.integers(1500, 6000)), int(rng.choice([1000, 2000]))
    scale, g, sigma = float(2 ** rng.choice([16, 24, 32])), 10 ** rng.uniform(-1, 2.5), rng.uniform(0.2, 1.0)
    noise = np.exp(rng.normal(0, sigma, total))
    scales, flags = dynamic_loss_scaler(scale, g * noise, window)
    every = int(rng.choice([1, 5, 10]))
    steps = np.arange(1, total + 1)[every - 1 :: every]
    return steps, scales[every - 1 :: every], flags[every - 1 :: every]


def main() -> None:
    right = total = 0
    for name, (lr, fault) in lr_cases().items():
        row = []
        for every in (1, 10, 50):
            steps = np.arange(lr.size)[::every]
            alarm = any(event.severity != "info" for event in analyze_lr(steps, lr[::every]))
            right += alarm == fault
            total += 1
            row.append(f"every {every:>2}: {'alarm' if alarm else 'quiet':<5}")
        print(f"{name:<38} {'fault  ' if fault else 'planned'}  " + "  ".join(row))
    print(f"learning rate: {right} of {total} (case, interval) pairs right")
    alarmed = 0
    for seed in range(200):
        steps, scales, flags = healthy_scaler(seed)
        overflow = (steps, flags) if seed % 2 else None
        alarmed += any(p.severity != "info" for p in analyze_loss_scale(steps, scales, overflow))
    print(f"loss scale: {alarmed} of 200 healthy dynamic scalers alarmed")


if __name__ == "__main__":
    main()
