"""`tb-health report LOGDIR -o report.html`: one self-contained health report to keep or send.

The format follows the output's extension (`.html`, `.md`), or `--format`. The file needs
nothing else to be read: no script, no network, charts inline.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from tb_health_plugin.commands.check import Progress, overrides_in_force, positive_jobs, show_progress
from tb_health_plugin.commands.messages import read_problems, say
from tb_health_plugin.i18n import text

PROG = "tb-health report"
EXIT_OK, EXIT_USAGE, EXIT_ERROR = 0, 2, 2
FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def register(subparsers, lang: str = "en") -> None:
    """Add `report` to `subparsers`, its help in `lang`."""
    parser = subparsers.add_parser(
        "report",
        help=text("help.report.summary", lang),
        description=text("help.report.description", lang),
        epilog=text("help.report.epilog", lang),
    )
    parser.add_argument("logdir", metavar="LOGDIR")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help=text("help.report.output", lang))
    parser.add_argument("--format", choices=("html", "md"), help=text("help.report.format", lang))
    parser.add_argument("--lang", choices=("en", "zh"), help=text("help.report.lang", lang))
    parser.add_argument("--run", action="append", default=None, metavar="RUN", help=text("help.report.run", lang))
    parser.add_argument("--tag", action="append", default=[], metavar="ROLE=TAG",
                        help=text("help.report.tag", lang))
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help=text("help.check.progress", lang))
    parser.add_argument("--jobs", type=positive_jobs, default=None, metavar="N", help=text("help.report.jobs", lang))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tb_health_plugin.i18n import default_language, text

    lang = args.lang or default_language()
    output_format = args.format or FORMATS.get(os.path.splitext(args.output)[1].lower())
    if output_format is None:
        say(PROG, text("cli.report.format_unknown", lang, output=repr(args.output)))
        return EXIT_USAGE
    try:
        overrides = overrides_in_force(args.logdir, args.tag, lang)
    except ValueError as error:
        say(PROG, str(error))
        return EXIT_USAGE
    from tb_health_plugin.commands.check_workers import auto_jobs

    progress = Progress(sys.stderr, show=show_progress(args.progress, args.logdir), lang=lang)
    with read_problems(PROG, lang):
        written = write_report(args.logdir, output_format, lang, args.run, overrides, progress,
                               jobs=args.jobs if args.jobs is not None else auto_jobs())
    if written is None:
        say(PROG, text("cli.no_event_files", lang, logdir=args.logdir))
        return EXIT_USAGE
    if args.output == "-":
        sys.stdout.write(written)
    else:
        temporary = f"{args.output}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(written)
        os.replace(temporary, args.output)
        say(PROG, text("cli.report.wrote", lang, output=args.output))
    return EXIT_OK


def write_report(logdir: str, output_format: str, lang: str, runs: list[str] | None = None,
                 overrides: dict[str, str] | None = None, progress: Progress | None = None,
                 jobs: int = 1) -> str | None:
    """The report's text, or None when the logdir holds no runs. A local logdir's runs are
    analysed and its charts drawn in `jobs` worker processes (`check_workers`; the same text);
    library callers keep the default, 1, since forking a process that runs other threads is
    not safe."""
    from tb_health_plugin.analysis.engine import analyze_runs, logdir_report
    from tb_health_plugin.readers import LogdirReader
    from tb_health_plugin.readers.storage import is_url
    from tb_health_plugin.report.charts import draw_here
    from tb_health_plugin.report.document import build_report
    from tb_health_plugin.report.render import render_html, render_markdown

    progress = progress or Progress(sys.stderr, show=False, lang=lang)
    progress.say(progress.text("cli.progress.reading", logdir=logdir))
    started = time.perf_counter()
    reader = LogdirReader(logdir)
    reader.refresh()
    names = reader.run_names()
    if not names:
        return None
    snapshots = {name: reader.run(name) for name in names}  # one snapshot a run, analysed and charted
    points = sum(len(series) for run in snapshots.values() for series in run.scalars.values())
    progress.say(progress.text("cli.progress.read", runs=len(snapshots), points=points,
                               seconds=time.perf_counter() - started))
    with contextlib.ExitStack() as stack:
        workers = None
        if jobs > 1 and not is_url(logdir):
            import matplotlib.figure  # noqa: F401 - imported once, before the workers fork

            from tb_health_plugin.commands.check_workers import RunWorkers

            workers = stack.enter_context(RunWorkers(jobs))
        run_findings, on_progress = None, progress.analysed
        if workers is not None:
            own = workers.findings(list(snapshots.values()), overrides, on_progress)
            run_findings, on_progress = (lambda signals: own[signals.run]), None
        analysed = logdir_report(logdir, analyze_runs(list(snapshots.values()), overrides, lang=lang,
                                                      run_findings=run_findings, on_progress=on_progress), lang)

        def draw(tasks: list) -> list[str]:
            return workers.charts(tasks, progress.drawn) if workers is not None else draw_here(tasks, progress.drawn)

        document = build_report(logdir, reader, analysed, lang, runs, snapshots, draw=draw)
    return render_html(document) if output_format == "html" else render_markdown(document)
