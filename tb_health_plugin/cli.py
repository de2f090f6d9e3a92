"""The `tb-health` console script: one subcommand a module under `tb_health_plugin.commands`.

Exit codes (also in the README and each command's `--help`): 0 fine, 1 a finding reached
`--fail-on` (check) or nothing to convert (convert), 2 usage errors, an unreadable input or an
output that cannot be written, 130 interrupted (Ctrl-C), 141 stdout closed early (`| head`):
quietly, as `grep` does, 128 + SIGPIPE being what a shell shows for a command a pipe cut off.
Every failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tb_health_plugin.commands.messages import say
from tb_health_plugin.i18n import LANGUAGES, default_language, text

# Subcommand modules, each with `register(subparsers, lang)` that sets `func(args) -> int`.
COMMAND_MODULES = ("check", "report", "watch", "convert")

EXIT_USAGE = 2
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def help_language(argv: list[str]) -> str:
    """The language of `--help`: the last `--lang X` / `--lang=X` on the command line when it names
    a language we have (the parser is built before the arguments are parsed), else the locale's."""
    chosen = None
    for index, arg in enumerate(argv):
        if arg == "--lang" and index + 1 < len(argv):
            chosen = argv[index + 1]
        elif arg.startswith("--lang="):
            chosen = arg.partition("=")[2]
        elif arg == "--":
            break
    return chosen if chosen in LANGUAGES else default_language()


def build_parser(lang: str | None = None, only: str | None = None) -> argparse.ArgumentParser:
    """The `tb-health` parser, its help in `lang` (default: the locale's language). With `only`
    (a command's name) that command alone is registered: the other commands' modules are not
    imported (`watch` pulls in the notification sinks' mail and HTTP modules)."""
    lang = lang or default_language()
    parser = argparse.ArgumentParser(
        prog="tb-health",
        description=text("help.tb_health.description", lang),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if only is None else [only]:
        try:
            module = importlib.import_module(f"tb_health_plugin.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"tb_health_plugin.commands.{name}":
                raise
            continue
        module.register(subparsers, lang)
    return parser


def named_command(argv: list[str]) -> str | None:
    """The command `argv` starts with, if it names one (else the parser needs them all: to list
    them in `--help` or an error)."""
    return argv[0] if argv and argv[0] in COMMAND_MODULES else None


def main(argv: list[str] | None = None) -> int:
    args_given = sys.argv[1:] if argv is None else argv
    parser = build_parser(help_language(args_given), only=named_command(args_given))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"tb-health {args.command}"
    lang = getattr(args, "lang", None) or default_language()
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        say(prog, text("cli.interrupted", lang))
        return EXIT_INTERRUPTED
    except OSError as error:
        where = f"{error.filename}: " if error.filename else text("cli.cannot_write", lang)
        say(prog, f"{where}{error.strerror or error}")
        _discard_stdout()
        return EXIT_ERROR


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush of what is still buffered
    cannot fail again (and print "Exception ignored ..." on the way out)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a file (tests capture it): nothing will flush it to a pipe


if __name__ == "__main__":
    sys.exit(main())
