"""`python -m tb_health_demo` (what `./scripts/demo` runs): train the demo runs with the hooks,
print `tb-health check`'s report on them, then serve TensorBoard with the Health tab."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

EXIT_USAGE = 2
DEFAULT_LOGDIR = "demo_logs"
DEFAULT_PORT = 6006


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tb_health_demo",
        description="Trains small real MindSpore runs that show each problem, on the CPU with the trainer "
        "hooks (a few minutes on 2 cores), prints the health report, then serves TensorBoard with the Health tab.",
    )
    parser.add_argument("--logdir", default=DEFAULT_LOGDIR, help=f"where to write the runs (default: {DEFAULT_LOGDIR})")
    parser.add_argument("--no-serve", action="store_true", help="stop after training and the report")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TensorBoard's port (default: {DEFAULT_PORT})")
    parser.add_argument("--host", default="127.0.0.1", help="address TensorBoard binds to (default: 127.0.0.1)")
    parser.add_argument("--only", action="append", metavar="SCENARIO", help="train only this scenario (repeatable)")
    return parser


def run(args: argparse.Namespace) -> int:
    # Only look for MindSpore: importing it here, after this process has loaded protobuf's upb
    # backend for the readers, fails ("Descriptors cannot be created directly"). The runs train in
    # their own processes, which import MindSpore first.
    if importlib.util.find_spec("mindspore") is None:
        print("the demo trains with MindSpore: pip install 'tb-health-plugin[hooks]'", file=sys.stderr)
        return EXIT_USAGE
    from tb_health_demo.runner import DemoTrainingFailed, train_all
    from tb_health_demo.scenarios import SCENARIOS
    from tb_health_plugin.commands.check import check_logdir, render_text

    scenarios = SCENARIOS
    if args.only:
        known = {s.name for s in SCENARIOS}
        unknown = sorted(set(args.only) - known)
        if unknown:
            print(f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(sorted(known))}", file=sys.stderr)
            return EXIT_USAGE
        scenarios = tuple(s for s in SCENARIOS if s.name in args.only)
    logdir = Path(args.logdir).resolve()
    stale = [s.name for s in scenarios if (logdir / s.name).exists()]
    for name in stale:  # a second demo must not append to the first one's runs
        shutil.rmtree(logdir / name)
    print(f"Training {len(scenarios)} demo runs into {logdir} (MindSpore, CPU)", file=sys.stderr)
    try:
        train_all(logdir, scenarios)
    except DemoTrainingFailed as error:
        print(str(error), file=sys.stderr)
        return 1
    print(render_text(check_logdir(str(logdir)), fail_on=None))
    if args.no_serve:
        return 0
    return serve(logdir, args.host, args.port)


def serve(logdir: Path, host: str, port: int) -> int:
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host, "--port", str(port)]
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    print(f"\nTensorBoard with the Health tab: http://{shown}:{port}/#health  (Ctrl-C to stop)", file=sys.stderr)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
