"""The cost of `tb-health convert`'s second pass for the network graph, against reading the series.

Writes a MindSpore summary file as `SummaryRecord` lays it out (`bench_readers.write_mindspore_run`:
one event per step with three scalars, a 30-bucket histogram every 10 steps) with a graph event
of 600 operators at its start, then times (process CPU time, best of `--repeats`) reading the
run's series (`read_run`, what convert did before) and finding its graph (`read_graphs`).

    PYTHONPATH=. python bench/bench_convert_graph.py [--steps 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.bench_readers import frame, write_mindspore_run
from tb_health_plugin.graphs.anf_ir_schema import GraphEvent, GraphProto
from tb_health_plugin.graphs.summary_graphs import read_graphs
from tb_health_plugin.readers.discovery import MINDSPORE, discover_runs
from tb_health_plugin.readers.logdir_reader import read_run

OPERATORS = 600


def graph_record() -> bytes:
    graph = GraphProto(name="bench")
    for index in range(OPERATORS):
        node = graph.node.add(name=str(index + 1), op_type="MatMul", scope=f"Default/network/layer{index // 10}",
                              full_name=f"Default/network/layer{index // 10}/MatMul-op{index}")
        if index:
            node.input.add(name=str(index))
    return frame(GraphEvent(wall_time=1.7e9, step=1, graph_def=graph).SerializeToString())


def best_cpu(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "run"
        write_mindspore_run(folder, args.steps)
        (path,) = folder.glob("*_MS")
        path.write_bytes(graph_record() + path.read_bytes())
        files = discover_runs(root, (MINDSPORE,))["run"]
        assert len(read_graphs(str(path))) == 1
        series = best_cpu(lambda: read_run("run", files), args.repeats)
        graphs = best_cpu(lambda: read_graphs(str(path)), args.repeats)
        size = path.stat().st_size / 1e6
        print(f"{args.steps} steps, {size:.0f} MB: series {series:.2f} s CPU, graph pass {graphs:.2f} s CPU "
              f"(+{100 * graphs / series:.0f}%)")


if __name__ == "__main__":
    main()
