"""`tb-health check LOGDIR`: analyse every run under a logdir and print the report.

Text for people (one line per run with its verdict, then its findings), strict JSON for tools
(`analysis/findings.py`, as `http_api.md` describes it). The exit code says whether a finding reached `--fail-on`,
or why the report is missing or incomplete (`help.check.epilog` in the catalogue, shown by `--help`).
stdout carries only the report; progress goes to stderr, when stderr is a terminal or the
logdir is big enough for the wait to be noticed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any, TextIO

from tb_health_plugin.commands.messages import printable, read_problems, say
from tb_health_plugin.contract import SCALAR_SPELLINGS, SEVERITY_RANK, is_samples_axis
from tb_health_plugin.i18n import LANGUAGES, default_language, text
from tb_health_plugin.logdir_config import CONFIG_FILE, LogdirConfigError, load_logdir_config

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE = 2  # part of LOGDIR could not be read: the report covers only the rest
STORAGE_ATTEMPTS = 4  # reads of a failing store before giving up: waits of 2, 4 and 8 s (`storage.Backoff`)
PROG = "tb-health check"
BIG_LOGDIR_BYTES = 64 << 20  # beyond this, progress is shown even when stderr is not a terminal
VERDICT_WIDTH = 9


def register(subparsers, lang: str = "en") -> None:
    """Add `check` to `subparsers`, its help in `lang`."""
    parser = subparsers.add_parser(
        "check",
        help=text("help.check.summary", lang),
        description=text("help.check.description", lang),
        epilog=text("help.check.epilog", lang, config=CONFIG_FILE, attempts=STORAGE_ATTEMPTS),
    )
    parser.add_argument("logdir", metavar="LOGDIR", help=text("help.check.logdir", lang))
    parser.add_argument("--format", choices=("text", "json"), default="text", help=text("help.check.format", lang))
    parser.add_argument(
        "--fail-on",
        choices=("warning", "critical"),
        default="critical",
        help=text("help.check.fail_on", lang),
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="ROLE=TAG",
        help=text("help.check.tag", lang, roles=", ".join(SCALAR_SPELLINGS), config=CONFIG_FILE),
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help=text("help.check.progress", lang),
    )
    parser.add_argument(
        "--lang",
        choices=LANGUAGES,
        default=None,
        help=text("help.check.lang", lang),
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        default=None,
        help=text("help.check.cache", lang),
    )
    parser.add_argument(
        "--jobs",
        type=positive_jobs,
        default=None,
        metavar="N",
        help=text("help.check.jobs", lang),
    )
    parser.set_defaults(func=run)


def positive_jobs(value: str) -> int:
    """`--jobs N`: a count of worker processes, at least 1."""
    jobs = int(value)
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{value!r} < 1")
    return jobs


def parse_tag_overrides(pairs: list[str], lang: str = "en") -> dict[str, str]:
    """`["loss=my/loss"]` -> {"loss": "my/loss"}; ValueError naming the bad pair or role."""
    overrides = {}
    for pair in pairs:
        role, sep, tag = pair.partition("=")
        role, tag = role.strip(), tag.strip()
        if not sep or not role or not tag:
            raise ValueError(text("cli.tag.syntax", lang, pair=repr(pair)))
        if role not in SCALAR_SPELLINGS:
            raise ValueError(text("cli.tag.unknown_role", lang, role=repr(role), roles=", ".join(SCALAR_SPELLINGS)))
        overrides[role] = tag
    return overrides


def overrides_in_force(logdir: str, tag_pairs: list[str], lang: str = "en") -> dict[str, str]:
    """The tag overrides for LOGDIR as `check` and the tab use them: its `tb-health.toml`'s
    [tags], replaced role by role by `--tag`; ValueError saying what is wrong with either, or
    with LOGDIR."""
    overrides = parse_tag_overrides(tag_pairs, lang)
    problem = logdir_problem(logdir, lang)
    if problem:
        raise ValueError(problem)
    return {**load_logdir_config(logdir).tags, **overrides}  # LogdirConfigError is a ValueError


def run(args: argparse.Namespace) -> int:
    lang = args.lang or default_language()
    try:
        overrides = parse_tag_overrides(args.tag, lang)
    except ValueError as error:
        say(PROG, str(error))
        return EXIT_USAGE
    problem = logdir_problem(args.logdir, lang)
    if problem:
        say(PROG, problem)
        return EXIT_USAGE
    progress = Progress(sys.stderr, show=show_progress(args.progress, args.logdir), lang=lang)
    from tb_health_plugin.commands.check_workers import auto_jobs
    from tb_health_plugin.readers.storage import StorageError  # the readers pull in protobuf: import on use

    with read_problems(PROG, lang) as problems:
        try:
            report = check_logdir(args.logdir, overrides, progress, lang, cache_dir=args.cache,
                                  jobs=args.jobs if args.jobs is not None else auto_jobs())
        except (MissingTagError, LogdirConfigError) as error:
            say(PROG, str(error))
            return EXIT_USAGE
        except StorageError as error:  # object storage still failing after the retries
            say(PROG, text("cli.gave_up", lang, error=error, attempts=STORAGE_ATTEMPTS))
            return EXIT_UNREADABLE
    if not report["runs"]:
        say(PROG, text("cli.no_event_files", lang, logdir=args.logdir))
        return EXIT_USAGE
    unreadable = problems.count
    if args.format == "json":
        json.dump(report, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report, args.fail_on, unreadable=unreadable))
    if unreadable:
        say(PROG, text(f"cli.unreadable_left_out.{_number(unreadable)}", lang, n=unreadable, logdir=args.logdir,
                       code=EXIT_UNREADABLE))
        return EXIT_UNREADABLE
    return EXIT_FINDINGS if reaches(report, args.fail_on) else EXIT_OK


class MissingTagError(ValueError):
    """A `--tag ROLE=TAG` naming a tag that no run under the logdir has."""


def logdir_problem(logdir: str, lang: str = "en") -> str | None:
    """Why LOGDIR cannot be analysed (in `lang`), or None. A URL (object storage) is checked by reading it."""
    from tb_health_plugin.readers.storage import is_url

    if is_url(logdir):
        return None
    if not os.path.exists(logdir):
        return text("cli.logdir.missing", lang, logdir=logdir)
    if not os.path.isdir(logdir):
        return text("cli.logdir.not_a_directory", lang, logdir=logdir)
    if not os.access(logdir, os.R_OK | os.X_OK):
        return text("cli.logdir.denied", lang, logdir=logdir)
    return None


def check_logdir(
    logdir: str, overrides: dict[str, str] | None = None, progress: Progress | None = None, lang: str = "en",
    cache_dir: str | None = None, jobs: int = 1,
) -> dict:
    """The contract report for every run under `logdir`, its findings written in `lang`, with the
    tag overrides of its `tb-health.toml` (as the Health tab uses them) replaced role by role by
    `overrides` (`--tag`); `LogdirConfigError` when that file cannot be used. With `cache_dir`,
    what was read and analysed before is reused there (`check_cache`; the same report). Without
    a cache, a local logdir's runs are read and analysed in `jobs` worker processes
    (`check_workers`; the same report); library callers keep the default, 1, since forking a
    process that runs other threads is not safe."""
    from tb_health_plugin.readers.storage import is_url

    progress = progress or Progress(sys.stderr, show=False, lang=lang)
    from_file = load_logdir_config(logdir).tags
    progress.say(progress.text("cli.progress.reading", logdir=logdir))
    started = time.perf_counter()
    cache = None
    if cache_dir is not None and is_url(logdir):
        progress.warn(progress.text("cli.cache.local_only"))
    elif cache_dir is not None:
        from tb_health_plugin.commands.check_cache import CheckCache

        try:
            cache = CheckCache(cache_dir, logdir, note=lambda message_id, **fields: progress.warn(
                progress.text(message_id, **fields)))
        except OSError as error:
            progress.warn(progress.text("cli.cache.unusable", cache=cache_dir, problem=error.strerror or error))
    with contextlib.ExitStack() as stack:
        workers = None
        if jobs > 1 and cache is None and not is_url(logdir):
            from tb_health_plugin.analysis import engine  # noqa: F401 - imported once, before the workers fork
            from tb_health_plugin.commands.check_workers import RunWorkers

            workers = stack.enter_context(RunWorkers(jobs))
        return _check(logdir, overrides, progress, lang, from_file, cache, workers, started)


def _check(logdir, overrides, progress, lang, from_file, cache, workers, started) -> dict:
    runs = _read_runs(logdir, cache, progress, workers)
    check_overrides_present(runs, overrides or {}, progress)
    check_overrides_present(runs, {r: t for r, t in from_file.items() if r not in (overrides or {})}, progress,
                            source=CONFIG_FILE)
    overrides = {**from_file, **(overrides or {})}
    points = sum(len(series) for run in runs for series in run.scalars.values())
    progress.say(progress.text("cli.progress.read", runs=len(runs), points=points,
                               seconds=time.perf_counter() - started))

    from tb_health_plugin.analysis.engine import analyze_runs, logdir_report  # not needed for --help

    def analyze(some_runs: list, run_findings=None) -> list[dict]:
        on_progress = progress.analysed
        if workers is not None and run_findings is None:
            own = workers.findings(some_runs, overrides, on_progress)
            run_findings, on_progress = (lambda signals: own[signals.run]), None
        return analyze_runs(some_runs, overrides, lang=lang, run_findings=run_findings, on_progress=on_progress)

    reports = analyze(runs) if cache is None else cache.analyse(runs, overrides, lang, analyze)
    return logdir_report(logdir, reports, lang)


def _read_runs(logdir: str, cache, progress: Progress, workers=None) -> list:
    """Every run under `logdir`, read in full (by `workers` when given) or, with a cache,
    resumed from its saved state."""
    from tb_health_plugin.readers.discovery import discover_runs
    from tb_health_plugin.readers.logdir_reader import LogdirReader, read_logdir, refresh_fully

    def on_retry(problem: str, wait_s: float) -> None:
        progress.warn(progress.text("cli.progress.retry", problem=problem, wait=wait_s))

    if workers is not None:
        return workers.read(discover_runs(logdir))
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
            raise MissingTagError(progress.text("cli.tag.missing", where=where, tag=repr(tag), role=role))
        if lacking:
            progress.warn(progress.text("cli.tag.lacking", where=where, lacking=len(lacking), runs=len(runs),
                                        tag=repr(tag), example=lacking[0], role=role))


def reaches(report: dict, fail_on: str) -> bool:
    threshold = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK[f["severity"]] >= threshold for run in report["runs"] for f in run["findings"])


def render_text(report: dict[str, Any], fail_on: str | None = "critical", unreadable: int = 0) -> str:
    """One line per run (verdict, name, steps, counts), then its findings indented; last, the
    exit code (left out with `fail_on=None`, where nothing exits on it). Written in the report's
    language, from the catalogue (`cli.*`). Text from the logs (run names, tags in messages) has
    its control characters escaped: a line is a line."""
    lang = report.get("language") or "en"
    runs = report["runs"]
    counts = {status: sum(r["status"] == status for r in runs) for status in ("critical", "warning", "healthy", "no_data")}
    summary = text("list_separator", lang).join(
        text("cli.count", lang, n=n, status=text(f"status.{status}", lang)) for status, n in counts.items() if n
    )
    logdir = printable(report["logdir"])
    lines = [text(f"cli.summary.{_number(len(runs))}", lang, runs=len(runs), logdir=logdir, counts=summary)]
    names = {id(run): printable(run["run"]) for run in runs}
    name_width = min(max((len(name) for name in names.values()), default=4), 48)
    for run in runs:
        steps = run["steps"]
        span = text("cli.steps", lang, **steps) if steps else text("cli.no_scalar_data", lang)
        alarms = [f for f in run["findings"] if f["severity"] != "info"]
        tail = text(f"cli.alarms.{_number(len(alarms))}", lang, n=len(alarms)) if alarms else ""
        verdict = text(f"cli.verdict.{run['status']}", lang)
        lines.append(f"{verdict:<{VERDICT_WIDTH}} {names[id(run)]:<{name_width}}  {span}  {tail}".rstrip())
        for finding in run["findings"]:
            lines.append(text("cli.finding", lang, step=finding["step"],
                              severity=text(f"severity.{finding['severity']}", lang),
                              kind=printable(finding["kind"]), message=printable(finding["message"])))
    if fail_on is not None and unreadable:
        lines.append(text(f"cli.exit.unreadable.{_number(unreadable)}", lang, code=EXIT_UNREADABLE, n=unreadable))
    elif fail_on is not None:
        reached = reaches(report, fail_on)
        lines.append(text("cli.exit.fail_on", lang, code=EXIT_FINDINGS if reached else EXIT_OK, fail_on=fail_on))
    return "\n".join(lines) + "\n"


def _number(count: int) -> str:
    """The catalogue's form for `count` things: `.one` or `.many` (languages without the
    distinction say the same in both)."""
    return "one" if count == 1 else "many"


def show_progress(mode: str, logdir: str) -> bool:
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
    """Progress lines on stderr, never on stdout (which carries the report), in `lang`."""

    def __init__(self, stream: TextIO, show: bool, lang: str = "en") -> None:
        self.stream, self.show, self.lang = stream, show, lang
        self._last = 0.0

    def text(self, message_id: str, **fields: Any) -> str:
        return text(message_id, self.lang, **fields)

    def analysed(self, done: int, total: int) -> None:
        self._count("cli.progress.analysed", done, total)

    def drawn(self, done: int, total: int) -> None:
        """A report's charts drawn so far (`tb-health report`)."""
        self._count("cli.progress.drawn", done, total)

    def _count(self, message_id: str, done: int, total: int) -> None:
        now = time.monotonic()
        if self.show and (done == total or now - self._last >= 1.0):
            self._last = now
            self.say(self.text(message_id, done=done, total=total))

    def say(self, line: str) -> None:
        if self.show:
            print(f"tb-health: {printable(line)}", file=self.stream, flush=True)

    def warn(self, line: str) -> None:
        """Shown whatever the progress setting: something the user must know."""
        print(f"{PROG}: {printable(line)}", file=self.stream, flush=True)
