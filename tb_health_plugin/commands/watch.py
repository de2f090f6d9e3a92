"""`tb-health watch LOGDIR --notify SINK`: re-check a logdir as it grows and send new findings.

For runs logged without our hooks (MindFormers' own TensorBoard logs, any tfevents writer) and
for jobs whose ranks should speak with one voice: the watcher reads every rank, so a finding
that several ranks share goes out once per job, and a cross-rank finding (a straggler) once.
Reading is incremental (only new bytes each pass). What was sent is kept in a state file, so
a restarted watcher does not repeat itself; `--once` makes one pass (for cron or CI).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

from tb_health_plugin.commands.check import overrides_in_force
from tb_health_plugin.commands.messages import say
from tb_health_plugin.contract import SEVERITIES
from tb_health_plugin.i18n import default_language, text

PROG = "tb-health watch"
EXIT_OK, EXIT_USAGE = 0, 2
FLUSH_TIMEOUT_S = 60.0  # at exit, how long queued notifications may still take


def register(subparsers, lang: str = "en") -> None:
    """Add `watch` to `subparsers`, its help in `lang`."""
    from tb_health_plugin.notify.sinks import SINK_KINDS

    parser = subparsers.add_parser(
        "watch",
        help=text("help.watch.summary", lang),
        description=text("help.watch.description", lang),
        epilog=text("help.watch.epilog", lang),
    )
    parser.add_argument("logdir", metavar="LOGDIR")
    parser.add_argument("--notify", action="append", default=[], choices=SINK_KINDS, metavar="SINK",
                        help=text("help.watch.notify", lang, sinks=", ".join(SINK_KINDS)))
    parser.add_argument("--notify-config", metavar="FILE", help=text("help.watch.notify_config", lang))
    parser.add_argument("--interval", type=float, default=30.0, help=text("help.watch.interval", lang))
    parser.add_argument("--once", action="store_true", help=text("help.watch.once", lang))
    parser.add_argument("--min-severity", choices=SEVERITIES[1:], default="warning",
                        help=text("help.watch.min_severity", lang))
    parser.add_argument("--lang", choices=("en", "zh"), default=None,
                        help=text("help.watch.lang", lang))
    parser.add_argument("--tensorboard-url", metavar="URL",
                        help=text("help.watch.tensorboard_url", lang))
    parser.add_argument("--state", metavar="FILE",
                        help=text("help.watch.state", lang))
    parser.add_argument("--tag", action="append", default=[], metavar="ROLE=TAG",
                        help=text("help.watch.tag", lang))
    parser.set_defaults(func=run)


def default_state_file(logdir: str) -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(os.path.abspath(logdir).encode()).hexdigest()[:16]
    return os.path.join(cache, "tb-health", f"watch-{digest}.json")


def run(args: argparse.Namespace) -> int:
    from tb_health_plugin.notify import JobDeduplicator, Notifier, sinks_from_config

    if not args.notify and not args.notify_config:
        say(PROG, "name at least one --notify SINK (or --notify-config FILE)")
        return EXIT_USAGE
    if args.interval <= 0:
        say(PROG, "--interval must be positive")
        return EXIT_USAGE
    try:
        sinks = sinks_from_config(args.notify, config_file=args.notify_config)
        overrides = overrides_in_force(args.logdir, args.tag, args.lang or default_language())
    except ValueError as error:  # ConfigError and LogdirConfigError are ValueErrors
        say(PROG, str(error))
        return EXIT_USAGE
    except OSError as error:
        say(PROG, f"{error.filename}: {error.strerror}")
        return EXIT_USAGE
    state_file = args.state or default_state_file(args.logdir)
    deduplicator = JobDeduplicator(_load_state(state_file))
    lang = args.lang or default_language()
    notifier = Notifier(sinks, lang=lang)
    watcher = Watcher(args.logdir, overrides, args.tensorboard_url, args.min_severity, lang)
    try:
        while True:
            fresh = deduplicator.new(watcher.alerts())
            notifier.submit(fresh)
            _save_state(state_file, deduplicator.state())
            say(PROG, f"{watcher.run_count} runs, {len(fresh)} new finding{'s' if len(fresh) != 1 else ''}"
                f"{' sent to ' + ', '.join(s.kind for s in sinks) if fresh else ''}")
            if args.once:
                break
            time.sleep(args.interval)
    finally:
        notifier.close(FLUSH_TIMEOUT_S)
    return EXIT_OK


class Watcher:
    """Reads a logdir incrementally and reports its alerts after each refresh."""

    def __init__(self, logdir: str, overrides: dict[str, str], tensorboard_url: str | None,
                 min_severity: str, lang: str = "en") -> None:
        from tb_health_plugin.readers import LogdirReader

        self.logdir, self.overrides = logdir, overrides
        self.tensorboard_url, self.min_severity, self.lang = tensorboard_url, min_severity, lang
        self.reader = LogdirReader(logdir)
        self.run_count = 0
        self._analysed = False

    def alerts(self):
        """The alerts of every run, or none without analysing when nothing was logged since the
        last pass (its alerts were handled then)."""
        from tb_health_plugin.analysis.engine import analyze_runs, logdir_report
        from tb_health_plugin.notify import alerts_from_report

        if not self.reader.refresh() and self._analysed:
            return []
        self._analysed = True
        runs = [self.reader.run(name) for name in self.reader.run_names()]
        self.run_count = len(runs)
        report = logdir_report(self.logdir, analyze_runs(runs, self.overrides, lang=self.lang), self.lang)
        return alerts_from_report(report, self.tensorboard_url, self.min_severity)


def _load_state(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
        return state.get("sent", []) if isinstance(state, dict) else []
    except (OSError, ValueError):
        return []


def _save_state(path: str, sent: list[dict]) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"sent": sent}, handle)
        os.replace(temporary, path)
    except OSError as error:
        print(f"{PROG}: cannot save what was sent to {path}: {error.strerror}", file=sys.stderr)
