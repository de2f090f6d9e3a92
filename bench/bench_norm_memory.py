"""Peak memory of the hooks' training steps on a model above `norms.FUSED_MAX_PARAMETERS`: the
fused rows (every gradient concatenated into one vector, `norms.row_norm_stats`) against the
per-tensor norms, which such a model runs (`trainer_hooks/norms.py`).

    PYTHONPATH=. python bench/bench_norm_memory.py [--width 2048] [--layers 4] [--steps 3]

Each variant trains `--steps` steps of a stack of `--layers` Dense(width, width) layers (graph
mode, CPU, SGD) in a fresh process and reports the process's peak resident memory (ru_maxrss)
and the median step time after the compiling first step: `plain`, `nn.TrainOneStepCell`;
`fused`, `TrainOneStepWithHealth` with the limit raised so that it takes the fused rows;
`per_tensor`, the same cell as it runs by default at this size. Their global norms must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("plain", "fused", "per_tensor")


def run_variant(variant: str, width: int, layers: int, steps: int) -> dict:
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn

    import trainer_hooks.norms
    from trainer_hooks import TrainOneStepWithHealth
    from trainer_hooks.train_cell import HEALTH_GRAD_STATS

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(0)
    net = nn.SequentialCell(*[nn.Dense(width, width) for _ in range(layers)])
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), learning_rate=1e-6)
    if variant == "plain":
        cell = nn.TrainOneStepCell(loss_net, optimizer)
    else:
        if variant == "fused":  # forced for the comparison
            trainer_hooks.norms.FUSED_MAX_PARAMETERS = 1 << 40
        cell = TrainOneStepWithHealth(loss_net, optimizer)
        assert cell.fused_norms == (variant == "fused"), "the model must exceed norms.FUSED_MAX_PARAMETERS"
    rng = np.random.default_rng(0)
    x, y = Tensor(rng.standard_normal((8, width)).astype(np.float32)), Tensor(rng.standard_normal((8, width)).astype(np.float32))
    times, norm = [], None
    for _ in range(steps + 1):  # the first step compiles
        started = time.perf_counter()
        out = cell(x, y)
        if variant != "plain":
            norm = float(out[1].asnumpy()[HEALTH_GRAD_STATS])
        else:
            out.asnumpy()
        times.append(time.perf_counter() - started)
    params = sum(int(p.size) for p in net.trainable_params())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "params": params, "peak_mb": peak_mb, "step_s": statistics.median(times[1:]), "norm": norm}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one child's run
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.width, args.layers, args.steps)))
        return 0
    rows = []
    for variant in VARIANTS:
        with tempfile.TemporaryDirectory() as scratch:  # MindSpore writes kernel folders into the cwd
            result = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--variant", variant, "--width", str(args.width),
                 "--layers", str(args.layers), "--steps", str(args.steps)],
                capture_output=True, text=True, check=True, cwd=scratch,
                env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))},
            )
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    params = rows[0]["params"]
    print(f"model: {args.layers} x Dense({args.width}, {args.width}), {params:,} parameters "
          f"({params * 4 / 2**20:.0f} MiB of float32 gradients)")
    print(f"{'variant':<14}{'peak RSS MiB':>14}{'over plain':>12}{'step s':>9}  global norm")
    for row in rows:
        extra = row["peak_mb"] - rows[0]["peak_mb"]
        norm = "-" if row["norm"] is None else f"{row['norm']:.6g}"
        print(f"{row['variant']:<14}{row['peak_mb']:>14.0f}{extra:>12.0f}{row['step_s']:>9.3f}  {norm}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
