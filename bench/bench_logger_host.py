"""The hooks' host-side cost per training step: what `HealthLogger.log_step` takes from the
training thread, without a model, for this tree and (`--before REV`) another revision's hooks.

The compiled step's own cost (the gradient norms' kernels) is `bench_hook_overhead.py`'s; this
one isolates what the callback does in Python after each step, which that benchmark's wall-time
noise on a shared machine hides: per step, the health vector as the training cell returns it
(27 per-parameter norms, as on that benchmark's tiny model), at the defaults (`collect_freq=10`,
online analysis on). It times the calling thread only (`time.thread_time`): the writer's and
the online analysis's threads do their work beside the training, not in its way. The two
versions alternate over rounds, each in a fresh logger, and the paired median ratio is printed.
MindSpore is imported first, as in training, so protobuf runs its pure-Python backend.

    PYTHONPATH=. python bench/bench_logger_host.py [--before REV] [--steps 2000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time

import mindspore  # noqa: F401  - protobuf's pure-Python backend, as in a training process
import numpy as np

from bench.bench_hook_overhead import BEFORE_PACKAGE, install_before

PARAMETERS = 27  # the tiny Transformer's parameter tensors (bench_hook_overhead.py)


def host_seconds_per_step(package: str, steps: int, log_dir: str) -> float:
    """Thread CPU seconds per `log_step` call of `package`'s HealthLogger at its defaults."""
    hooks = importlib.import_module(package)
    rng = np.random.default_rng(0)
    with hooks.HealthLogger(log_dir, rank=0, batch_size=8) as logger:
        started = time.thread_time()
        for step in range(1, steps + 1):
            stats = np.abs(rng.normal(1.0, 0.1, PARAMETERS + 1)).astype(np.float32)
            logger.log_step(step, np.float32(2.0 / step ** 0.3), grad_stats=stats, lr=np.float32(1e-3))
            logger.step_ended()
            logger.step_begins()
        return (time.thread_time() - started) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also time the hooks of this git revision")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tb-health-logger-host-")
    packages = ["trainer_hooks"]
    if args.before:
        install_before(args.before, workdir)
        packages.append(BEFORE_PACKAGE)
    results: dict[str, list[float]] = {package: [] for package in packages}
    for round_index in range(args.rounds):
        order = packages if round_index % 2 == 0 else packages[::-1]
        for package in order:
            results[package].append(host_seconds_per_step(package, args.steps, f"{workdir}/{package}-{round_index}"))
    print(f"host CPU per step of HealthLogger.log_step, training thread only ({args.rounds} rounds x "
          f"{args.steps} steps, {PARAMETERS} parameter norms, collect_freq 10):")
    for package, seconds in results.items():
        label = "this tree" if package == "trainer_hooks" else f"--before {args.before}"
        print(f"  {label:<20} median {statistics.median(seconds) * 1e6:8.1f} us   min {min(seconds) * 1e6:8.1f} us")
    if args.before:
        ratios = [new / old for new, old in zip(results["trainer_hooks"], results[BEFORE_PACKAGE], strict=True)]
        quartiles = statistics.quantiles(ratios, n=4)
        print(f"  paired ratio this/before: median {statistics.median(ratios):.3f} "
              f"[IQR {quartiles[0]:.3f}, {quartiles[2]:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
