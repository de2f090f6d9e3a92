"""What the hooks' online analysis costs as a run grows: one analysis's time at each length, and
the share of the wall time its thread then takes at a given step time.

The analysis runs in a background thread of the training process every `analyze_every`
collections, and no sooner than its last run's time divided by `online.MAX_BUSY_FRACTION` after
that run started. It runs Python under the interpreter lock the training loop needs between
steps, so its busy share is what it can take from a small model's steps (`bench_logger_host.py`:
a Python thread busy all the time made the tiny model's steps 2.3x longer). This feeds a
`HealthLogger` at its defaults (tiny-model parameter norms, a falling noisy loss, a rate) for up
to `--steps` steps, times one analysis at each length (`--at`), and prints the interval between
analyses and the thread's share of the wall time for steps of `--step-ms` milliseconds: every
`analyze_every` collections, or the busy cap's interval when that is longer.

    PYTHONPATH=. python bench/bench_online_analysis.py [--at 1000 10000 100000] [--step-ms 40 800]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import mindspore  # noqa: F401  - protobuf's pure-Python backend, as in a training process
import numpy as np

from bench.bench_logger_host import PARAMETERS, tiny_model_weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", nargs="+", type=int, default=[1000, 10000, 100000], help="run lengths, in steps")
    parser.add_argument("--step-ms", nargs="+", type=float, default=[40.0, 800.0], help="step times to price it at")
    parser.add_argument("--repeats", type=int, default=3, help="analyses timed at each length (the median is kept)")
    args = parser.parse_args()

    import trainer_hooks
    from trainer_hooks.online import MAX_BUSY_FRACTION

    options = trainer_hooks.HealthOptions(log_dir=".")
    steps_between = options.collect_freq * options.analyze_every
    rng = np.random.default_rng(0)
    weights = tiny_model_weights()
    print(f"HealthLogger defaults (collect_freq {options.collect_freq}, analyze_every {options.analyze_every}: "
          f"an analysis every {steps_between} steps at most), MAX_BUSY_FRACTION {MAX_BUSY_FRACTION}")
    header = "".join(f"{f'interval @{ms:g} ms':>18}{'busy':>8}" for ms in args.step_ms)
    print(f"{'steps':>8}{'points kept':>13}{'one analysis':>14}{header}")
    with trainer_hooks.HealthLogger(tempfile.mkdtemp(prefix="tb-health-online-"), rank=0, batch_size=8,
                                    parameters=weights, analyze_every=10**9) as logger:
        step = 0
        for target in sorted(args.at):
            while step < target:
                step += 1
                stats = np.abs(rng.normal(1.0, 0.1, PARAMETERS + 1)).astype(np.float32)
                loss = 2.0 / step**0.3 * np.exp(0.1 * rng.standard_normal())
                logger.log_step(step, np.float32(loss), grad_stats=stats, lr=np.float32(1e-3))
                logger.step_ended()
                logger.step_begins()
            timings = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                logger.online.analyze_now()
                timings.append(time.perf_counter() - started)
            took = float(np.median(timings))
            row = ""
            for ms in args.step_ms:
                interval = max(steps_between * ms / 1000, took / MAX_BUSY_FRACTION)
                row += f"{interval:>16.1f} s{took / interval:>8.2%}"
            print(f"{step:>8}{logger.online.retained()[0]:>13}{took:>12.3f} s{row}", flush=True)


if __name__ == "__main__":
    main()
