"""The `tb-health` console script: one subcommand a module under `tb_health_plugin.commands`.

Exit codes follow `shared/CONTRACTS.md`: 0 fine, 1 a finding reached `--fail-on`, 2 usage
errors or an unreadable logdir.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, each with `register(subparsers)` that sets `func(args) -> int`.
COMMAND_MODULES = ("check", "convert", "demo")

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tb-health",
        description="Training-health checks for TensorBoard and MindSpore logs.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"tb_health_plugin.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"tb_health_plugin.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
