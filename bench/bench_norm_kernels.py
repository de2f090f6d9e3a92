"""The in-step gradient norms timed alone, beside cheaper variants, on the tiny model's gradients.

`bench_hook_overhead.py` shows that the compiled step's extra work costs about what the whole
documented setup does on the tiny model, and cannot resolve a fraction of a millisecond of a
35-45 ms step. This times the norms alone: each variant is an `ms.jit` function of the 27
gradients of `bench_hook_overhead`'s tiny Transformer (397k float32 values, random normal at
`--sigma`), called `--calls` times per timing, `--timings` rounds timing each variant once, in an order that
rotates; the figure is the median per call minus that of a compiled function returning at once. Every variant's result is also
compared with float64 norms (largest relative error over the global and per-parameter norms).

  rows (shipped)   `norms.row_norm_stats`: rows of 128, three power-of-two scales, selects
  concat only      the concatenation into rows, nothing else: the floor of the fused layout
  plain rows       the rows' float32 sums of squares and their segment sum, no range guard
                   (underflows below about 1e-19, overflows above 1e19)
  l1-scaled rows   each row scaled by 128 over its sum of magnitudes, then one sum of squares:
                   also exact over float32's range, with one scaled pass instead of three
  L2Loss per tensor  `ops.L2Loss` of each gradient (one kernel each), no range guard
  global, branch   the global norm alone from `ops.L2Loss` per tensor, and the shipped rows
                   only when its sum is out of float32's safe range (a run-time branch): what a
                   step that writes no per-parameter norm would need (its per-parameter norms
                   read 0, so its error column is 1.0)

    PYTHONPATH=. python bench/bench_norm_kernels.py [--calls 50] [--timings 9] [--sigma 1e-3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def build_variants(layout):
    """The compiled variants (module docstring), each taking the gradients as `*grads`."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.common import dtype as mstype
    from mindspore.ops import composite as C

    from trainer_hooks.norms import FLOAT32_TINY, ROW_VALUES, fused_rows, norms_from_row_sums, row_norm_stats

    hyper_map = C.HyperMap()
    l2_loss = C.MultitypeFuncGraph("bench_l2_loss")

    @l2_loss.register("Tensor")
    def _l2_loss(tensor):
        return ops.L2Loss()(tensor)

    tiny = ms.Tensor(FLOAT32_TINY, mstype.float32)
    down = ms.Tensor(2.0**-70, mstype.float32)
    row_values = ms.Tensor(float(ROW_VALUES), mstype.float32)
    safe_sum = ms.Tensor(2.0**-90, mstype.float32)
    no_parameters = ms.Tensor(np.zeros(layout.count, np.float32))

    def rows_of(grads):
        return fused_rows(grads, layout.pads)

    def per_parameter(row_sums):
        return norms_from_row_sums(row_sums, layout.row_segments, layout.count)

    @ms.jit
    def returns_at_once(*grads):
        return grads[0][0]

    @ms.jit
    def shipped(*grads):
        return row_norm_stats(grads, layout.pads, layout.row_segments, layout.count)

    @ms.jit
    def concat_only(*grads):
        return rows_of(grads)[0]

    @ms.jit
    def plain_rows(*grads):
        rows = rows_of(grads)
        return per_parameter(ops.cast(ops.reduce_sum(rows * rows, 1), mstype.float64))

    @ms.jit
    def l1_scaled_rows(*grads):
        rows = rows_of(grads)
        magnitude = ops.reduce_sum(ops.abs(rows), 1)
        scale = ops.select(ops.isfinite(magnitude), row_values / ops.maximum(magnitude, tiny), ops.ones_like(magnitude) * down)
        scaled = rows * ops.expand_dims(scale, 1)
        scale64 = ops.cast(scale, mstype.float64)
        return per_parameter(ops.cast(ops.reduce_sum(scaled * scaled, 1), mstype.float64) / (scale64 * scale64))

    @ms.jit
    def l2_loss_per_tensor(*grads):
        square_sums = ops.stack(hyper_map(l2_loss, grads)) * 2.0
        return ops.concat((ops.reshape(ops.sqrt(ops.reduce_sum(square_sums)), (1,)), ops.sqrt(square_sums)))

    @ms.jit
    def global_with_branch(*grads):  # the global norm alone, exact through a run-time branch
        square_sum = ops.addn(hyper_map(l2_loss, grads)) * 2.0
        if ops.isfinite(square_sum) and square_sum >= safe_sum:
            out = ops.concat((ops.reshape(ops.sqrt(square_sum), (1,)), no_parameters))
        else:
            out = row_norm_stats(grads, layout.pads, layout.row_segments, layout.count)
        return out

    variants = {"rows (shipped)": shipped, "concat only": concat_only, "plain rows": plain_rows,
                "l1-scaled rows": l1_scaled_rows, "L2Loss per tensor": l2_loss_per_tensor,
                "global, branch": global_with_branch}
    return returns_at_once, variants


def seconds_per_call(functions: dict, grads, calls: int, timings: int) -> dict[str, float]:
    """Median seconds per call of each function: `timings` rounds, each timing every function
    once in an order that rotates from round to round (a shared machine's load drifts)."""
    for function in functions.values():
        function(*grads).asnumpy()  # compile
    names = list(functions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(timings):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            for _ in range(calls):
                out = functions[name](*grads)
            out.asnumpy()
            samples[name].append((time.perf_counter() - started) / calls)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--timings", type=int, default=9)
    parser.add_argument("--sigma", type=float, default=1e-3, help="standard deviation of the random gradients")
    args = parser.parse_args()

    import mindspore as ms

    from bench.bench_hook_overhead import SIZES, build_net
    from trainer_hooks.norms import RowLayout

    ms.set_context(mode=ms.GRAPH_MODE)
    parameters = build_net(SIZES["tiny"]).trainable_params()
    rng = np.random.default_rng(0)
    arrays = [rng.normal(0.0, args.sigma, p.shape).astype(np.float32) for p in parameters]
    grads = [ms.Tensor(a) for a in arrays]
    per_tensor = np.sqrt([np.sum(np.square(a.astype(np.float64))) for a in arrays])
    reference = np.concatenate(([np.sqrt(np.sum(per_tensor**2))], per_tensor))
    layout = RowLayout(p.size for p in parameters)
    returns_at_once, variants = build_variants(layout)
    took = seconds_per_call({"returns at once": returns_at_once, **variants}, grads, args.calls, args.timings)
    floor = took.pop("returns at once")
    print(f"{len(arrays)} gradients, {sum(a.size for a in arrays)} values, sigma {args.sigma:g}; median of "
          f"{args.timings} timings of {args.calls} calls (the variants interleaved), minus a call that returns "
          f"at once ({floor * 1e3:.3f} ms)")
    print(f"{'variant':<20}{'ms per call':>12}{'largest relative error':>26}")
    for name, function in variants.items():
        out = function(*grads).asnumpy().astype(np.float64)
        error = f"{np.max(np.abs(out - reference) / reference):.2e}" if out.shape == reference.shape else "-"
        print(f"{name:<20}{(took[name] - floor) * 1e3:>12.3f}{error:>26}")


if __name__ == "__main__":
    main()
