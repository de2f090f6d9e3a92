"""The heatmap of a run with many parameters: rendering it vs serving it from the view cache.

Builds the per-parameter gradient-norm series of `--parameters` parameters (`--steps` logged
steps each) in memory, then times, through `HealthService.view`'s cache (`ViewCache`), the first
request (heatmap + JSON) and repeated ones, and prints the response size.

    python -m bench.bench_heatmap_cache --parameters 100000
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tb_health_plugin.plugin import json_body
from tb_health_plugin.run_data import ScalarSeries
from tb_health_plugin.service import ViewCache
from tb_health_plugin.views import heatmap as heatmap_view


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    steps = np.arange(args.steps, dtype=np.int64) * 10
    per_param = {
        f"model.layers.{i // 8}.w{i % 8}": (f"grad_norm/model.layers.{i // 8}.w{i % 8}",
                                            ScalarSeries(steps, np.zeros(args.steps), rng.random(args.steps)))
        for i in range(args.parameters)
    }

    def render() -> str:
        return json_body({"run": "wide", **heatmap_view.heatmap(per_param, heatmap_view.DEFAULT_WIDTH, None, None)})

    cache = ViewCache()
    key, version = ("wide", "heatmap", (heatmap_view.DEFAULT_WIDTH, None, None)), 1
    started, cpu = time.perf_counter(), time.process_time()
    body = render()
    cache.put(key, version, body)
    first, first_cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"{args.parameters} parameters x {args.steps} steps: response {len(body) / 1e6:.1f} MB")
    if cache.get(key, version) is None:
        print(f"not cached: larger than the cache's {cache.max_bytes / 1e6:.0f} MB; every request renders it")
        return
    hits = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        cache.get(key, version)
        hits.append(time.perf_counter() - started)
    print(f"first request (render + JSON): {first:.2f} s wall, {first_cpu:.2f} s CPU")
    print(f"cached requests: median {statistics.median(hits) * 1e6:.1f} us over {args.repeats}; cache holds"
          f" {cache.bytes / 1e6:.1f} MB of at most {cache.max_bytes / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
