"""The hooks' host-side cost per training step: what `HealthLogger.log_step` takes from the
training thread, without a model, for this tree and (`--before REV`) another revision's hooks.

The compiled step's own cost (the gradient norms' kernels) is `bench_hook_overhead.py`'s; this
one isolates what the callback does in Python after each step, which that benchmark's wall-time
noise on a shared machine hides: per step, the health vector as the training cell returns it
(27 per-parameter norms) and the weights (float32 arrays of the shapes of that benchmark's tiny
model's 27 parameters, 397k values, so the weight reads every 50 steps and the histograms every
100 are included), at the defaults (`collect_freq=10`, online analysis on).

Two clocks: the calling thread's CPU (`time.thread_time`), and the process's (`time.process_time`,
every thread), since the writer's thread (TensorBoard's, which computed each record's CRC in
pure Python until the hooks gave it the C one) and the online analysis's thread hold the
interpreter lock while they run Python and so delay the training thread's next callback: a busy Python thread beside a training loop
of the tiny model made its steps 2.3x longer here. The two versions alternate over rounds, each
in a fresh logger, and the paired median ratios are printed. MindSpore is imported first, as in
training, so protobuf runs its pure-Python backend.

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

from bench.bench_hook_overhead import BEFORE_PACKAGE, SIZES, build_net, install_before

PARAMETERS = 27  # the tiny Transformer's parameter tensors (bench_hook_overhead.py)


def tiny_model_weights() -> dict[str, np.ndarray]:
    """Float32 arrays shaped like the tiny benchmark model's parameters, by name."""
    net = build_net(SIZES["tiny"])
    rng = np.random.default_rng(1)
    return {p.name: rng.standard_normal(p.shape).astype(np.float32) * 0.02 for p in net.trainable_params()}


def host_seconds_per_step(package: str, steps: int, log_dir: str, weights: dict) -> tuple[float, float]:
    """Thread and process CPU seconds per `log_step` call of `package`'s HealthLogger at its
    defaults, the logger's closing (its final analysis) left out."""
    hooks = importlib.import_module(package)
    rng = np.random.default_rng(0)
    with hooks.HealthLogger(log_dir, rank=0, batch_size=8, parameters=weights) as logger:
        thread_started, process_started = time.thread_time(), time.process_time()
        for step in range(1, steps + 1):
            stats = np.abs(rng.normal(1.0, 0.1, PARAMETERS + 1)).astype(np.float32)
            logger.log_step(step, np.float32(2.0 / step ** 0.3), grad_stats=stats, lr=np.float32(1e-3))
            logger.step_ended()
            logger.step_begins()
        logger.flush()  # the writer thread's queued records, in the process figure
        return (time.thread_time() - thread_started) / steps, (time.process_time() - process_started) / steps


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
    weights = tiny_model_weights()
    assert len(weights) == PARAMETERS
    results: dict[str, list[tuple[float, float]]] = {package: [] for package in packages}
    for round_index in range(args.rounds):
        order = packages if round_index % 2 == 0 else packages[::-1]
        for package in order:
            results[package].append(host_seconds_per_step(package, args.steps, f"{workdir}/{package}-{round_index}", weights))
    print(f"host CPU per step of HealthLogger.log_step ({args.rounds} rounds x {args.steps} steps, "
          f"{PARAMETERS} parameter norms, weights of {sum(w.size for w in weights.values())} values, "
          "collect_freq 10, weights every 50 steps, histograms every 100):")
    for package, seconds in results.items():
        label = "this tree" if package == "trainer_hooks" else f"--before {args.before}"
        for clock, index in (("training thread", 0), ("whole process", 1)):
            values = [pair[index] for pair in seconds]
            print(f"  {label:<20} {clock:<16} median {statistics.median(values) * 1e6:8.1f} us   "
                  f"min {min(values) * 1e6:8.1f} us")
    if args.before:
        for clock, index in (("training thread", 0), ("whole process", 1)):
            ratios = [new[index] / old[index]
                      for new, old in zip(results["trainer_hooks"], results[BEFORE_PACKAGE], strict=True)]
            quartiles = statistics.quantiles(ratios, n=4)
            print(f"  paired ratio this/before, {clock}: median {statistics.median(ratios):.3f} "
                  f"[IQR {quartiles[0]:.3f}, {quartiles[2]:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
