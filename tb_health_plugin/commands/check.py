"""`tb-health check LOGDIR`: analyse every run under a logdir and print the report.

Text for people (one line per run with its verdict, then its findings), strict JSON for tools
(`analysis/findings.py`, as `http_api.md` describes it). The exit code says whether a finding reached `--fail-on`,
or why the report is missing or incomplete (`EXIT_CODES_HELP`, shown by `--help`).
stdout carries only the report; progress goes to stderr, when stderr is a terminal or the
logdir is big enough for the wait to be noticed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TextIO

from tb_health_plugin.analysis.engine import analyze_runs, logdir_report
from tb_health_plugin.commands.messages import printable, read_problems, say
from tb_health_plugin.contract import SCALAR_SPELLINGS, SEVERITY_RANK, is_samples_axis
from tb_health_plugin.i18n import LANGUAGES, default_language
from tb_health_plugin.logdir_config import CONFIG_FILE, LogdirConfigError, load_logdir_config

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE = 2  # part of LOGDIR could not be read: the report covers only the rest
STORAGE_ATTEMPTS = 4  # reads of a failing store before giving up: waits of 2, 4 and 8 s (`storage.Backoff`)
PROG = "tb-health check"
EXIT_CODES_HELP = (
    "exit codes: 0 no finding reaches --fail-on; 1 one does; 2 usage error, LOGDIR unreadable or "
    f"without event files, a --tag naming a tag no run has, a {CONFIG_FILE} that cannot be used, "
    "a file or folder under LOGDIR that could not be read (the report covers the rest), object "
    f"storage still failing after {STORAGE_ATTEMPTS} attempts, or a report that could not be written; "
    "130 interrupted (Ctrl-C); 141 stdout closed before the report was written (e.g. | head)."
)
BIG_LOGDIR_BYTES = 64 << 20  # beyond this, progress is shown even when stderr is not a terminal
VERDICT_WIDTH = 9


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="analyse every run under LOGDIR and print a health report",
        description="Analyse every run under LOGDIR (tfevents or MindSpore summaries) and report "
        "its health. Names from the logs are printed with control characters escaped.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("logdir", metavar="LOGDIR",
                        help="a folder, or a URL such as s3://bucket/prefix (read through fsspec)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="report format (default: text)")
    parser.add_argument(
        "--fail-on",
        choices=("warning", "critical"),
        default="critical",
        help="exit 1 when a finding reaches this severity (default: critical)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="ROLE=TAG",
        help="use TAG for ROLE instead of the usual spellings, e.g. --tag loss=my/loss "
        f"(roles: {', '.join(SCALAR_SPELLINGS)}); repeatable; overrides the [tags] of LOGDIR/{CONFIG_FILE}, "
        "which the Health tab reads too",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress on stderr: auto = when stderr is a terminal or the logdir is large",
    )
    parser.add_argument(
        "--lang",
        choices=LANGUAGES,
        default=None,
        help="language of the findings (default: from the locale, LC_ALL/LC_MESSAGES/LANG; else en)",
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        default=None,
        help="keep what was read and analysed in DIR (e.g. ~/.cache/tb-health/check), so the next check "
        "of a local LOGDIR reads only what was appended and re-analyses only the runs that changed; "
        "the report is the same as without it",
    )
    parser.set_defaults(func=run)


def parse_tag_overrides(pairs: list[str]) -> dict[str, str]:
    """`["loss=my/loss"]` -> {"loss": "my/loss"}; ValueError naming the bad pair or role."""
    overrides = {}
    for pair in pairs:
        role, sep, tag = pair.partition("=")
        role, tag = role.strip(), tag.strip()
        if not sep or not role or not tag:
            raise ValueError(f"--tag expects ROLE=TAG, got {pair!r}")
        if role not in SCALAR_SPELLINGS:
            raise ValueError(f"unknown role {role!r} in --tag; roles: {', '.join(SCALAR_SPELLINGS)}")
        overrides[role] = tag
    return overrides


def overrides_in_force(logdir: str, tag_pairs: list[str]) -> dict[str, str]:
    """The tag overrides for LOGDIR as `check` and the tab use them: its `tb-health.toml`'s
    [tags], replaced role by role by `--tag`; ValueError saying what is wrong with either, or
    with LOGDIR."""
    overrides = parse_tag_overrides(tag_pairs)
    problem = logdir_problem(logdir)
    if problem:
        raise ValueError(problem)
    return {**load_logdir_config(logdir).tags, **overrides}  # LogdirConfigError is a ValueError


def run(args: argparse.Namespace) -> int:
    try:
        overrides = parse_tag_overrides(args.tag)
    except ValueError as error:
        say(PROG, str(error))
        return EXIT_USAGE
    problem = logdir_problem(args.logdir)
    if problem:
        say(PROG, problem)
        return EXIT_USAGE
    progress = Progress(sys.stderr, show=_show_progress(args.progress, args.logdir))
    from tb_health_plugin.readers.storage import StorageError  # the readers pull in protobuf: import on use

    with read_problems(PROG) as problems:
        try:
            report = check_logdir(args.logdir, overrides, progress, args.lang or default_language(),
                                  cache_dir=args.cache)
        except (MissingTagError, LogdirConfigError) as error:
            say(PROG, str(error))
            return EXIT_USAGE
        except StorageError as error:  # object storage still failing after the retries
            say(PROG, f"{error} (gave up after {STORAGE_ATTEMPTS} attempts)")
            return EXIT_UNREADABLE
    if not report["runs"]:
        say(PROG, f"no event files found under {args.logdir}")
        return EXIT_USAGE
    unreadable = problems.count
    if args.format == "json":
        json.dump(report, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report, args.fail_on, unreadable=unreadable))
    if unreadable:
        say(PROG, f"{unreadable} unreadable path{'s' if unreadable != 1 else ''} under {args.logdir} "
            f"left out of the report (exit {EXIT_UNREADABLE})")
        return EXIT_UNREADABLE
    return EXIT_FINDINGS if reaches(report, args.fail_on) else EXIT_OK


class MissingTagError(ValueError):
    """A `--tag ROLE=TAG` naming a tag that no run under the logdir has."""


def logdir_problem(logdir: str) -> str | None:
    """Why LOGDIR cannot be analysed, or None. A URL (object storage) is checked by reading it."""
    from tb_health_plugin.readers.storage import is_url

    if is_url(logdir):
        return None
    if not os.path.exists(logdir):
        return f"{logdir}: no such directory"
    if not os.path.isdir(logdir):
        return f"{logdir}: not a directory"
    if not os.access(logdir, os.R_OK | os.X_OK):
        return f"{logdir}: permission denied"
    return None


def check_logdir(
    logdir: str, overrides: dict[str, str] | None = None, progress: Progress | None = None, lang: str = "en",
    cache_dir: str | None = None,
) -> dict:
    """The contract report for every run under `logdir`, its findings written in `lang`, with the
    tag overrides of its `tb-health.toml` (as the Health tab uses them) replaced role by role by
    `overrides` (`--tag`); `LogdirConfigError` when that file cannot be used. With `cache_dir`,
    what was read and analysed before is reused there (`check_cache`; the same report)."""
    from tb_health_plugin.readers.storage import is_url

    progress = progress or Progress(sys.stderr, show=False)
    from_file = load_logdir_config(logdir).tags
    progress.say(f"reading {logdir} ...")
    started = time.perf_counter()
    cache = None
    if cache_dir is not None and is_url(logdir):
        progress.warn("--cache is used for local logdirs only; reading everything")
    elif cache_dir is not None:
        from tb_health_plugin.commands.check_cache import CheckCache

        try:
            cache = CheckCache(cache_dir, logdir, note=progress.warn)
        except OSError as error:
            progress.warn(f"cannot use the cache in {cache_dir} ({error.strerror or error}); reading everything")
    runs = _read_runs(logdir, cache, progress)
    check_overrides_present(runs, overrides or {}, progress)
    check_overrides_present(runs, {r: t for r, t in from_file.items() if r not in (overrides or {})}, progress,
                            source=CONFIG_FILE)
    overrides = {**from_file, **(overrides or {})}
    points = sum(len(series) for run in runs for series in run.scalars.values())
    progress.say(f"read {len(runs)} runs, {points:,} scalar points in {time.perf_counter() - started:.1f} s")
    def analyze(some_runs: list, run_findings=None) -> list[dict]:
        return analyze_runs(some_runs, overrides, lang=lang, run_findings=run_findings,
                            on_progress=lambda done, total: progress.every(done, total, "analysed"))

    reports = analyze(runs) if cache is None else cache.analyse(runs, overrides, lang, analyze)
    return logdir_report(logdir, reports, lang)


def _read_runs(logdir: str, cache, progress: Progress) -> list:
    """Every run under `logdir`, read in full or, with a cache, resumed from its saved state."""
    from tb_health_plugin.readers.logdir_reader import LogdirReader, read_logdir, refresh_fully

    def on_retry(problem: str, wait_s: float) -> None:
        progress.warn(f"{problem}; retrying in {wait_s:.0f} s")

    if cache is None:
        return read_logdir(logdir, attempts=STORAGE_ATTEMPTS, on_retry=on_retry)
    reader = LogdirReader(logdir)
    cache.restore(reader)
    refresh_fully(reader, STORAGE_ATTEMPTS, on_retry)
    reader.compact()
    cache.save(reader)
    return [reader.run(name) for name in reader.run_names()]


def check_overrides_present(runs, overrides: dict[str, str], progress: Progress, source: str = "") -> None:
    """Raise `MissingTagError` for a `--tag` whose tag no run has (its role's checks would be
    dropped without a word); say which runs lack it when only some do. An entry of the logdir's
    `tb-health.toml` (`source`) is only warned about: the tab, reading the same file, goes on."""
    for role, tag in overrides.items():
        lacking = [run.name for run in runs if tag not in run.scalars or is_samples_axis(tag)]
        where = f"{source} [tags] {role} = {tag!r}" if source else f"--tag {role}={tag}"
        if runs and len(lacking) == len(runs) and not source:
            raise MissingTagError(f"{where}: no run has a scalar tag {tag!r}; "
                                  f"the {role} checks would be skipped")
        if lacking:
            progress.warn(f"{where}: {len(lacking)} of {len(runs)} runs lack {tag!r} "
                          f"(e.g. {lacking[0]}); their {role} checks are skipped")


def reaches(report: dict, fail_on: str) -> bool:
    threshold = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK[f["severity"]] >= threshold for run in report["runs"] for f in run["findings"])


def render_text(report: dict[str, Any], fail_on: str | None = "critical", unreadable: int = 0) -> str:
    """One line per run (verdict, name, steps, counts), then its findings indented; last, the
    exit code (left out with `fail_on=None`, where nothing exits on it). Text from the logs
    (run names, tags in messages) has its control characters escaped: a line is a line."""
    runs = report["runs"]
    counts = {status: sum(r["status"] == status for r in runs) for status in ("critical", "warning", "healthy", "no_data")}
    summary = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items() if n)
    logdir = printable(report["logdir"])
    lines = [f"tb-health: {len(runs)} run{'s' if len(runs) != 1 else ''} under {logdir}: {summary}"]
    names = {id(run): printable(run["run"]) for run in runs}
    name_width = min(max((len(name) for name in names.values()), default=4), 48)
    for run in runs:
        steps = run["steps"]
        span = f"steps {steps['first']}-{steps['last']}" if steps else "no scalar data"
        alarms = [f for f in run["findings"] if f["severity"] != "info"]
        tail = f"{len(alarms)} alarm{'s' if len(alarms) != 1 else ''}" if alarms else ""
        lines.append(f"{run['status'].upper():<{VERDICT_WIDTH}} {names[id(run)]:<{name_width}}  {span}  {tail}".rstrip())
        for finding in run["findings"]:
            lines.append(
                f"    step {finding['step']:>8}  {finding['severity']:<8} {printable(finding['kind']):<20} "
                f"{printable(finding['message'])}"
            )
    if fail_on is not None and unreadable:
        lines.append(f"exit {EXIT_UNREADABLE} ({unreadable} unreadable path{'s' if unreadable != 1 else ''} left out)")
    elif fail_on is not None:
        reached = reaches(report, fail_on)
        lines.append(f"exit {EXIT_FINDINGS if reached else EXIT_OK} (--fail-on {fail_on})")
    return "\n".join(lines) + "\n"


def _show_progress(mode: str, logdir: str) -> bool:
    if mode != "auto":
        return mode == "always"
    return sys.stderr.isatty() or _logdir_bytes(logdir, BIG_LOGDIR_BYTES) >= BIG_LOGDIR_BYTES


def _logdir_bytes(logdir: str, stop_at: int) -> int:
    """Total size of the files under `logdir`, counting stops once `stop_at` is reached."""
    from tb_health_plugin.readers.discovery import walk_folders  # iterative: any depth

    total = 0
    for folder, _, files in walk_folders(logdir):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue
            if total >= stop_at:
                return total
    return total


class Progress:
    """Progress lines on stderr, never on stdout (which carries the report)."""

    def __init__(self, stream: TextIO, show: bool) -> None:
        self.stream, self.show = stream, show
        self._last = 0.0

    def say(self, text: str) -> None:
        if self.show:
            print(f"tb-health: {printable(text)}", file=self.stream, flush=True)

    def warn(self, text: str) -> None:
        """Shown whatever the progress setting: something the user must know."""
        print(f"{PROG}: {printable(text)}", file=self.stream, flush=True)

    def every(self, done: int, total: int, verb: str) -> None:
        now = time.monotonic()
        if self.show and (done == total or now - self._last >= 1.0):
            self._last = now
            self.say(f"{verb} {done}/{total} runs")
