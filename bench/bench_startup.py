"""Start-up cost of `tb-health check --help` and of the tab's worker before its first listing.

    PYTHONPATH=. python bench/bench_startup.py [--baseline TREE] [--repeats 7]

Each case is a fresh interpreter, timed on the wall clock and in CPU seconds (user + system of
the child, from `getrusage`: the shared machine's load changes wall times several-fold):
- `check --help`: `python -m tb_health_plugin.cli check --help`, what every command pays before
  it reads anything;
- `worker imports`: `import tb_health_plugin.worker_host`, what the tab's worker imports before
  it reads the logdir and sends its first full listing.
With `--baseline TREE` (another checkout of the package, e.g. the previous commit's) the same
cases run against it too, interleaved with ours, so both see the same load. Medians are quoted,
with the load average before and after, and whether scipy was imported.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "check --help": ["-m", "tb_health_plugin.cli", "check", "--help"],
    "worker imports": ["-c", "import tb_health_plugin.worker_host"],
}
SCIPY_PROBE = "; import sys; print(any(m.split('.')[0] == 'scipy' for m in sys.modules), file=sys.stderr)"


def timed(tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh interpreter running `args` with `tree` on the path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True, cwd=tree,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports_scipy(tree: Path, args: list[str]) -> bool:
    if args[0] == "-c":
        probe = [args[0], args[1] + SCIPY_PROBE]
    else:  # run the module's main the way `-m` does, then look
        probe = ["-c", "import sys, runpy; sys.argv = ['tb-health', *sys.argv[1:]]\n"
                 "try:\n    runpy.run_module('tb_health_plugin.cli', run_name='__main__')\n"
                 "except SystemExit:\n    pass\n" + SCIPY_PROBE.lstrip("; "), *args[2:]]
    done = subprocess.run([sys.executable, *probe], capture_output=True, text=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    return done.stderr.strip().splitlines()[-1] == "True"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout of the package to compare with")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeats):
        for case, case_args in CASES.items():
            for label, tree in trees.items():
                times.setdefault((case, label), []).append(timed(tree, case_args))
    print(f"load average after: {os.getloadavg()[0]:.1f}  (median of {args.repeats}, fresh interpreters)")
    print(f"{'case':<16} {'tree':<10} {'wall s':>7} {'CPU s':>7}  scipy imported")
    for (case, label), samples in times.items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        print(f"{case:<16} {label:<10} {wall:7.2f} {cpu:7.2f}  {imports_scipy(trees[label], CASES[case])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
