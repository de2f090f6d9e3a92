"""What logging the network graph costs (`HealthMonitor(log_graph=True)`), on the demo's models.

Each measurement runs in a fresh process (MindSpore caches compiled graphs), after one real
training step on the CPU:
  graph mode   reading the training cell's compiled graph (`Cell.get_func_graph_proto()`) and
               converting it to a TensorBoard GraphDef: no compilation
  PyNative     compiling the wrapped cell (network + loss) once in graph mode for its graph,
               then converting it: the one extra compilation PyNative needs
Prints, per model and mode, the median over rounds of the wall time and of the process's CPU
time (the machine is shared: wall time grows with the load, CPU time much less), the graph's
node count and the load average.

    PYTHONPATH=. python bench/bench_graph_logging.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = ("transformer", "sigmoid_mlp")
MODES = ("graph", "pynative")


def measure(model_name: str, mode: str) -> dict:
    """One measurement, in this process (run by `main` in a child process)."""
    import time

    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from tb_health_demo.models import (
        DeepSigmoidMLP,
        GaussianClasses,
        MarkovTokens,
        TinyTransformerLM,
        TokenCrossEntropy,
    )
    from trainer_hooks.graph import compile_graph, compiled_graph, to_graph_def, wrapped_cell

    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    if model_name == "transformer":
        net, loss, batch = TinyTransformerLM(), TokenCrossEntropy(), MarkovTokens().next_batch()
    else:
        net, loss = DeepSigmoidMLP(), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        batch = GaussianClasses().next_batch()
    inputs = [ms.Tensor(np.asarray(part)) for part in batch]
    train_cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Adam(net.trainable_params(), 1e-3))
    train_cell.set_train()
    train_cell(*inputs)  # the first step (graph mode compiles here)
    wall, cpu = time.perf_counter(), time.process_time()
    graph = compiled_graph(train_cell)
    if graph is None:
        graph = compile_graph(wrapped_cell(train_cell), *inputs)
    graph_def = to_graph_def(graph)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "nodes": len(graph_def.node),
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child)))
        return
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    print(f"{'model':<12} {'mode':<9} {'wall s':>8} {'CPU s':>7} {'nodes':>6} {'load':>5}")
    for model_name in MODELS:
        for mode in MODES:
            results = []
            for _ in range(args.rounds):
                with tempfile.TemporaryDirectory() as scratch:  # MindSpore writes into the cwd
                    output = subprocess.run([sys.executable, __file__, "--child", model_name, mode], cwd=scratch,
                                            env=env, capture_output=True, text=True, check=True).stdout
                results.append(json.loads(output.strip().splitlines()[-1]))
            median = {key: statistics.median(r[key] for r in results) for key in results[0]}
            print(f"{model_name:<12} {mode:<9} {median['wall_s']:>8.2f} {median['cpu_s']:>7.2f} "
                  f"{int(median['nodes']):>6} {median['load']:>5.1f}")


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
