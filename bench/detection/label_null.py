"""How often the zoo's natural-spike rule labels pure noise: rule 6 of `zoo_labels` on runs that hold no spike.

    PYTHONPATH=. python -m bench.detection.label_null [--steps 2000] [--runs 5] [--sigmas 0.1 0.3 ...]

Rule 6 is a rarity rule (a step at least twice its context's median, half the initial loss
and 10 robust deviations above it, and twice the loss one step in twenty reached over the
previous 100 steps), and since stop 50 4.26 robust sds of the run's own detrended log-noise above
its context. The first thresholds are in the loss's own units, so how often noise alone passed
them depended on how wide the noise is (Gaussian log-noise of sd 2: 27 labels in 1,000 steps);
the noise test is calibrated on this benchmark (at most 0.4 in 1,000 for Gaussian noise of the
widths measured, sd 0.1 to 3; heavier-tailed noise still passes it). This benchmark feeds `zoo_labels.spike_steps` stationary
log-noise around 1 (the initial loss 1: its half is 0.5) of a known law and scale, nothing else,
and prints the labels per 1,000 steps: every one is a label on noise. The benchmark's spike
events by per-step log-noise (`run.print_spike_events_by_family`) are to be read beside it:
where the rule labels noise, a detector that finds no spike there is not missing one.
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.detection import zoo_labels

LAWS = ("gauss", "t3")  # the log-noise: Gaussian of sd sigma, or Student-t(3) of scale sigma


def labels_per_thousand(law: str, sigma: float, steps: int, runs: int, seed: int = 0) -> list[float]:
    """Rule 6's labels per 1,000 steps on each of `runs` noise-only runs."""
    rng = np.random.default_rng([seed, LAWS.index(law), int(round(sigma * 1000))])
    out = []
    for _ in range(runs):
        draws = rng.standard_normal(steps) if law == "gauss" else rng.standard_t(3, steps)
        loss = np.exp(sigma * draws)
        found = zoo_labels.spike_steps(loss, 1.0, zoo_labels.smoothing_window(steps))
        out.append(1000.0 * len(found) / steps)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 2.0, 3.0])
    args = parser.parse_args(argv)
    print(f"rule 6 labels per 1,000 steps of pure log-noise ({args.runs} runs of {args.steps} steps each): "
          "mean [min, max]")
    print(f"{'sigma':>6}" + "".join(f"{law:>22}" for law in LAWS))
    for sigma in args.sigmas:
        cells = []
        for law in LAWS:
            rates = labels_per_thousand(law, sigma, args.steps, args.runs)
            cells.append(f"{np.mean(rates):8.2f} [{min(rates):.1f}, {max(rates):.1f}]")
        print(f"{sigma:>6g}" + "".join(f"{cell:>22}" for cell in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
