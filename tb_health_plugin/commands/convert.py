"""`tb-health convert SRC DST`: MindSpore summary logs -> tfevents that TensorBoard shows natively.

MindSpore's SummaryRecord/SummaryCollector files use their own schema, which TensorBoard's
Scalars, Histograms and Distributions tabs cannot read. This command reads every MindSpore
summary file under SRC (`tb_health_plugin.readers`) and writes each run, under the same run
name, below DST with TensorBoard's own writer (`readers/tfevents_writer.py`). tfevents files in
SRC are left alone: TensorBoard reads them already. The network graph `SummaryCollector`
recorded (`collect_graph`) is written too, as a TensorBoard `GraphDef` for the Graphs tab
(`tb_health_plugin/graphs`). Every line it prints is a catalogue entry (`convert.*`) in the
language of `--lang` or of the locale, as `check` does it.

Exit codes: 0 converted, 1 nothing to convert, 2 usage errors (bad SRC, DST holding an earlier
conversion without --overwrite), a file or folder under SRC that could not be read (the rest is
converted) or DST not writable; 130 interrupted, 141 stdout closed early (see `cli.py`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tb_health_plugin.commands.messages import printable, read_problems, say
from tb_health_plugin.i18n import LANGUAGES, default_language, text
from tb_health_plugin.readers.discovery import CONVERTED_SUFFIX, MINDSPORE, discover_runs
from tb_health_plugin.readers.storage import StorageError, is_url, storage_for

EXIT_OK, EXIT_NOTHING, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE = 2
PROG = "tb-health convert"
BIG_INPUT_BYTES = 64 << 20  # beyond this, progress is shown even when stderr is not a terminal
PROGRESS_EVERY_BYTES = 64 << 20  # a progress line at least this often within a big run


def register(subparsers, lang: str = "en") -> None:
    """Add `convert` to `subparsers`, its help in `lang`."""
    parser = subparsers.add_parser(
        "convert",
        help=text("help.convert.summary", lang),
        description=text("help.convert.description", lang),
        epilog=text("help.convert.epilog", lang),
    )
    parser.add_argument("src", metavar="SRC", help=text("help.convert.src", lang))
    parser.add_argument("dst", metavar="DST", help=text("help.convert.dst", lang))
    parser.add_argument("--overwrite", action="store_true",
                        help=text("help.convert.overwrite", lang, suffix=CONVERTED_SUFFIX))
    parser.add_argument("--no-nonfinite-scalars", dest="nonfinite_scalars", action="store_false",
                        help=text("help.convert.no_nonfinite_scalars", lang))
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help=text("help.convert.progress", lang))
    parser.add_argument("--quiet", action="store_true", help=text("help.convert.quiet", lang))
    parser.add_argument("--lang", choices=LANGUAGES, default=None,
                        help=text("help.convert.lang", lang))
    parser.set_defaults(func=run)


def _usage_error(message: str) -> int:
    say(PROG, message)
    return EXIT_USAGE


def _number(count: int) -> str:
    """The catalogue's form for `count` things, as `check` names it: `.one` or `.many`."""
    return "one" if count == 1 else "many"


def _size(storage, path: str) -> int:
    return max(0, storage.size(path)[0])  # unreadable: reading it says so, once


def _earlier_conversions(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*tfevents*{CONVERTED_SUFFIX}")) if folder.is_dir() else []


class _Progress:
    """Progress lines on stderr in `lang`: one per run, and every PROGRESS_EVERY_BYTES inside big runs."""

    def __init__(self, total_bytes: int, enabled: bool, lang: str) -> None:
        self.total, self.enabled, self.done, self.next_report = total_bytes, enabled, 0, PROGRESS_EVERY_BYTES
        self.lang = lang

    def line(self, message_id: str, **fields: object) -> None:
        if self.enabled:
            percent = 100 * self.done / max(self.total, 1)
            line = text(message_id, self.lang, percent=percent, **fields)
            print(printable(line), file=sys.stderr, flush=True)  # run names come from the logs: escaped

    def advance(self, read: int) -> None:
        self.done += read
        if self.done >= self.next_report:
            self.next_report = self.done + PROGRESS_EVERY_BYTES
            self.line("convert.progress.read", done=self.done / 1e6, total=self.total / 1e6)


def run(args: argparse.Namespace) -> int:
    lang = args.lang or default_language()
    src, dst = (args.src if is_url(args.src) else Path(args.src)), Path(args.dst)
    if is_url(args.dst):
        return _usage_error(text("convert.dst.url", lang, dst=args.dst))
    if isinstance(src, Path) and not src.exists():
        return _usage_error(text("convert.src.missing", lang, src=src))
    if isinstance(src, Path) and not src.is_dir():
        return _usage_error(text("convert.src.not_a_directory", lang, src=src))
    if dst.exists() and not dst.is_dir():
        return _usage_error(text("convert.dst.not_a_directory", lang, dst=dst))
    with read_problems(PROG, lang) as problems:
        try:
            code = _convert(args, src, dst, lang)
        except StorageError as error:  # object storage failing (`readers/storage.py`): nothing written past it
            say(PROG, text("convert.storage_error", lang, error=error))
            return EXIT_UNREADABLE
    if problems.count and code != EXIT_USAGE:
        say(PROG, text(f"convert.unreadable_left_out.{_number(problems.count)}", lang, n=problems.count, src=src,
                       code=EXIT_UNREADABLE))
        return EXIT_UNREADABLE
    return code


def _convert(args: argparse.Namespace, src: Path | str, dst: Path, lang: str) -> int:
    # The reader and writer pull in protobuf and TensorBoard: imported here, not for `--help`.
    from tb_health_plugin.readers.logdir_reader import read_run
    from tb_health_plugin.readers.tfevents_writer import write_run

    storage = storage_for(str(src))
    runs = discover_runs(str(src), (MINDSPORE,), storage)
    if not runs:
        say(PROG, text("convert.no_summaries", lang, src=src))
        return EXIT_NOTHING
    targets = {name: dst if name == "." else dst.joinpath(*name.split("/")) for name in runs}
    existing = [path for folder in targets.values() for path in _earlier_conversions(folder)]
    if existing and not args.overwrite:
        return _usage_error(text("convert.earlier_conversion", lang, path=existing[0]))
    sizes = {name: sum(_size(storage, f.path) for f in files) for name, files in runs.items()}
    total = sum(sizes.values())
    show_progress = args.progress == "always" or (
        args.progress == "auto" and (sys.stderr.isatty() or total >= BIG_INPUT_BYTES)
    )
    for path in existing:
        path.unlink()
    start = time.perf_counter()
    progress = _Progress(total, show_progress, lang)
    scalars = histograms = skipped = empty = graphs = 0
    for index, (name, files) in enumerate(sorted(runs.items()), 1):
        progress.line("convert.progress.run", index=index, runs=len(runs), name=name, megabytes=sizes[name] / 1e6)
        data = read_run(name, files, on_bytes_read=progress.advance, storage=storage)
        graph_event = None if is_url(str(src)) else _graph_event(files, lang)  # graphs: local summaries only
        graphs += graph_event is not None
        stats = write_run(data, targets[name], nonfinite_scalars=args.nonfinite_scalars, graph_event=graph_event)
        scalars += stats.scalar_points
        histograms += stats.histogram_points
        empty += stats.empty_histograms
        skipped += data.skipped_records
    if not args.quiet:
        print(printable(_summary(lang, runs=len(runs), scalars=scalars, histograms=histograms, graphs=graphs, dst=dst,
                       seconds=time.perf_counter() - start, skipped=skipped, empty=empty)))
    return EXIT_OK


def _summary(lang: str, *, graphs: int, skipped: int, empty: int, **fields: object) -> str:
    """The line saying what was converted, in `lang`: the graphs clause and the notes on what
    was left out are whole catalogue phrases, present only when there is something to say."""
    graph_text = text(f"convert.summary.graphs.{_number(graphs)}", lang, n=graphs) if graphs else ""
    which = "both" if skipped and empty else "skipped" if skipped else "empty" if empty else None
    notes = text(f"convert.summary.notes.{which}", lang, skipped=skipped, empty=empty) if which else ""
    return text("convert.summary", lang, graphs=graph_text, notes=notes, **fields)


def _graph_event(files, lang: str):
    """The run's last recorded network graph as a TensorBoard event; a file whose graphs cannot
    be read costs the graph, never the conversion (the scalar reader reports unreadable files)."""
    from tb_health_plugin.graphs.summary_graphs import latest_graph_event  # protobuf schemas: on use

    try:
        return latest_graph_event([f.path for f in files])
    except Exception as error:  # noqa: BLE001 - the graph is an extra: the series still convert
        say(PROG, text("convert.graph_left_out", lang, error_type=type(error).__name__, error=error))
        return None
