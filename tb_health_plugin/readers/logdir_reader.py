"""`LogdirReader`: every run under a logdir, read incrementally, handed out as immutable snapshots.

`refresh()` discovers runs and files and reads only the bytes appended since the last refresh
(a partially written last record is retried next time). A run is re-read from scratch when one
of its files vanished or shrank, or when a new file sorts before one already read (the merge
order must not depend on when files were seen), or when its files turn out to come from processes
that wrote it at the same time (`writers`: both are then kept, told apart). Bad files and records
are skipped and counted in `RunData.skipped_records` (with a `RunData.notes` entry where a lying
length field made bytes be skipped); nothing in a file makes `refresh()` raise, and a FIFO or
other special file is never opened blocking.

Files are read through a `storage.Storage`: the local file system, or for a URL logdir an object
store through fsspec (one listing per refresh, ranged reads of the new bytes). A store that fails
(`StorageError`) ends the refresh early: nothing read before is dropped, the offsets stay where
the data ends, `problem` says what happened, and the next refresh tries again.

Heads-only reading (`HeadsOnly`, for triage on logdirs of thousands of ranks): the runs the
policy names keep the points of the scalar tags it names and only the first and last points of
the others (`accumulate.ScalarHeads`; histograms and text are kept whole). Every record is still
read and decoded, so their tags, step ranges, resumes, notes and writers are those of a full
read; what is saved is the memory of the points dropped. `read_in_full` reads such a run again
with every point, in place, when a caller needs them.

Threads: refreshes are serialised; `run()` and `version()` only wait for the run being read.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from tb_health_plugin.readers.accumulate import HeadsBuilder, HistogramBuilder, ScalarBuilder, TextBuilder
from tb_health_plugin.readers.discovery import FORMATS, MINDSPORE, EventFile, discover_runs
from tb_health_plugin.readers.mindspore_summary import MindSporeDecoder
from tb_health_plugin.readers.points import DecodedBatch
from tb_health_plugin.readers.records import (
    FOOTER_BYTES,
    FRAME_BYTES,
    HEADER_BYTES,
    RESYNC_WINDOW,
    header_crc_ok,
    scan_records,
)
from tb_health_plugin.readers.storage import (  # noqa: F401 - open_regular_file, NotARegularFile: re-exported
    Backoff,
    LocalStorage,
    NotARegularFile,
    Storage,
    StorageError,
    open_regular_file,
    storage_for,
)
from tb_health_plugin.readers.tfevents import TfeventsDecoder
from tb_health_plugin.readers.writers import FileSpan, assign_writers, writer_tag, writers_note
from tb_health_plugin.run_data import Backtrack, ReadNote, RunData
from tb_health_plugin.tfrecord import masked_crc

logger = logging.getLogger(__name__)
# A failing store is said by whoever reads (the tab, the CLI with its retries), not counted as an
# unreadable file: its own logger, outside the readers' (`commands.messages.read_problems`).
# Where no logging is set up (the CLI), nothing is printed for it: the CLI says it in its own words.
storage_logger = logging.getLogger("tb_health_plugin.storage")
storage_logger.addHandler(logging.NullHandler())

READ_CHUNK_BYTES = 2 << 20  # bytes read and decoded at a time: the vectorised decoding needs a few times this as scratch
_versions = itertools.count(1)


@dataclass(frozen=True)
class HeadsOnly:
    """Which runs a reader reads heads-only and which of their scalar tags keep every point."""

    runs: Callable[[str, int], bool]  # (run name, runs found in this refresh) -> read it heads-only
    keeps_points: Callable[[str], bool]  # scalar tag -> keep its points in a run read heads-only


class FileState:
    def __init__(self, event_file: EventFile) -> None:
        self.file = event_file
        self.offset = 0  # bytes consumed: everything before is decoded
        self.resyncing = False  # looking for a valid header after a damaged one
        self.identity: tuple[int, int] | None = None  # (device, inode) read: a file renamed over it is new
        self.probe = (-1, 0)  # (offset stuck at, where the search for a later valid record resumes)
        self.waiting_at_size = -1  # size at which the bytes left after `offset` could not be read yet


class RunState:
    """Everything read so far for one run, and the last snapshot handed out."""

    def __init__(self, name: str, writers: dict[str, int] | None = None, storage: Storage | None = None,
                 keeps_points: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.keeps_points = keeps_points  # None: every point kept; else a heads-only read (`HeadsOnly`)
        self.event_files: list[EventFile] = []  # as last discovered, for `LogdirReader.read_in_full`
        self.storage = storage if storage is not None else LocalStorage()
        self.writers = dict(writers or {})  # path -> writer index, for files of writers past the first
        self.spans: dict[str, FileSpan] = {}  # path -> what it logged, to tell concurrent writers apart
        self.lock = threading.Lock()
        self.files: dict[str, FileState] = {}
        self.failed_files: dict[str, int] = {}  # path -> size when reading it raised
        self.scalars: dict[str, ScalarBuilder | HeadsBuilder] = {}
        self.histograms: dict[str, HistogramBuilder] = {}
        self.texts: dict[str, TextBuilder] = {}
        self.backtracks: list[Backtrack] = []
        self.notes: dict[str, ReadNote] = {}  # what the reader had to do about the data, by message
        note = writers_note(self.writers)
        if note is not None:
            self.add_note("multiple_writers", *note)
        self.skipped_records = 0
        self.last_wall_time = 0.0
        self.tfevents_decoder = TfeventsDecoder()
        self.mindspore_decoder = MindSporeDecoder()
        self.version = next(_versions)
        self._snapshot: RunData | None = None
        self.on_bytes_read: Callable[[int], None] | None = None  # progress reports, bytes per chunk

    def touch(self) -> None:
        self.version = next(_versions)
        self._snapshot = None

    def snapshot(self) -> RunData:
        if self._snapshot is None:
            self._snapshot = RunData(
                name=self.name,
                scalars={tag: b.snapshot() for tag, b in sorted(self.scalars.items())},
                histograms={tag: b.snapshot() for tag, b in sorted(self.histograms.items())},
                texts={tag: b.snapshot() for tag, b in sorted(self.texts.items())},
                backtracks=list(self.backtracks),
                skipped_records=self.skipped_records,
                last_wall_time=self.last_wall_time,
                notes=list(self.notes.values()),
            )
        return self._snapshot

    def adopt(self, other: RunState) -> None:
        """Take over what `other` read of the same files (a heads-only run read again in full);
        the version stays, the data being the same."""
        for attribute in ("keeps_points", "spans", "files", "failed_files", "scalars", "histograms", "texts",
                          "backtracks", "notes", "skipped_records", "last_wall_time", "tfevents_decoder",
                          "mindspore_decoder"):
            setattr(self, attribute, getattr(other, attribute))
        self._snapshot = None

    def add_note(self, kind: str, message: str, args: dict | None = None) -> None:
        self.notes.setdefault(message, ReadNote(kind, message, args or {}))

    def nbytes(self) -> int:
        builders = [*self.scalars.values(), *self.histograms.values(), *self.texts.values()]
        return sum(b.nbytes() for b in builders)

    def compact(self) -> None:
        for builder in [*self.scalars.values(), *self.histograms.values(), *self.texts.values()]:
            builder.compact()
        self._snapshot = None

    def ingest(self, batch: DecodedBatch, path: str = "") -> None:
        """Merge a batch read from the file at `path` (its writer decides the tag names)."""
        span = self.spans.get(path) or self.spans.setdefault(path, FileSpan())
        writer = self.writers.get(path, 0)
        for raw_tag, steps, wall_times, values in batch.scalars_by_tag():
            span.add(raw_tag, steps, wall_times)
            tag = writer_tag(raw_tag, writer)
            builder = self.scalars.get(tag) or self.scalars.setdefault(tag, self._scalar_builder(tag))
            self.backtracks.extend(builder.extend(steps, wall_times, values))
        by_tag = defaultdict(list)
        for point in batch.histograms:
            by_tag[point.tag].append(point)
        for raw_tag, points in by_tag.items():
            span.add(raw_tag, np.fromiter((p.step for p in points), np.int64, len(points)),
                     np.fromiter((p.wall_time for p in points), np.float64, len(points)))
            tag = writer_tag(raw_tag, writer)
            builder = self.histograms.get(tag) or self.histograms.setdefault(tag, HistogramBuilder(tag))
            self.backtracks.extend(builder.extend(
                [p.step for p in points], [p.wall_time for p in points], [p.buckets for p in points],
                [p.nan_count for p in points], [p.inf_count for p in points],
            ))
        by_tag = defaultdict(list)
        for point in batch.texts:
            by_tag[point.tag].append(point)
        for raw_tag, points in by_tag.items():
            tag = writer_tag(raw_tag, writer)
            builder = self.texts.get(tag) or self.texts.setdefault(tag, TextBuilder(tag))
            self.backtracks.extend(builder.extend(
                [p.step for p in points], [p.wall_time for p in points], [p.text for p in points]
            ))
        self.skipped_records += batch.undecodable
        self.last_wall_time = max(self.last_wall_time, batch.last_wall_time)

    def _scalar_builder(self, tag: str) -> ScalarBuilder | HeadsBuilder:
        if self.keeps_points is None or self.keeps_points(tag):
            return ScalarBuilder(tag)
        return HeadsBuilder(tag)

    def writer_plan(self, files: list[EventFile]) -> dict[str, int]:
        """Which files belong to writers past the first, from what has been read (see `writers`)."""
        return assign_writers([f.path for f in files], self.spans)

    def needs_reset(self, files: list[EventFile]) -> bool:
        current = {f.path for f in files}
        if any(path not in current for path in self.files):
            return True
        read_keys = [state.file.sort_key for state in self.files.values() if state.offset]
        newest_read = max(read_keys) if read_keys else None
        for event_file in files:
            state = self.files.get(event_file.path)
            if state is None:
                if newest_read is not None and event_file.sort_key < newest_read:
                    return True
                continue
            size, identity = self.storage.size(event_file.path)
            if size < 0:
                identity = state.identity  # unreadable now: only matters if something was read from it before
            if state.offset and (size < state.offset or identity != state.identity):
                return True
        return False

    def read_new_bytes(self, event_file: EventFile) -> bool:
        """Read what was appended to one file; True if anything changed."""
        state = self.files.get(event_file.path)
        if state is None:
            state = self.files[event_file.path] = FileState(event_file)
        decoder = self.mindspore_decoder if event_file.format == MINDSPORE else self.tfevents_decoder
        changed = False
        handle, (size, identity) = self.storage.open(event_file.path)
        with handle:
            if state.identity is not None and identity != state.identity:
                return False  # replaced since `needs_reset` looked: the next refresh starts the run afresh
            state.identity = identity
            while state.offset < size:
                handle.seek(state.offset)
                buf = handle.read(min(READ_CHUNK_BYTES, size - state.offset))  # read(n) preallocates n
                if not buf:
                    break
                scan = scan_records(buf, state.resyncing)
                if scan.consumed == 0 and not scan.resyncing:  # stopped at a valid header (found by a resync too)
                    state.resyncing = False
                    needed = _whole_record_size(buf)
                    if needed is not None and state.offset + needed > size and len(buf) >= HEADER_BYTES:
                        # Either a live writer's unfinished last record, or a length that lies: a
                        # complete valid record after it proves the latter (writers only append).
                        if self._skip_impossible_record(handle, state, size, needed):
                            changed = True
                            continue
                        break
                    if needed is None or needed <= len(buf):
                        break
                    handle.seek(state.offset)
                    buf = handle.read(needed)
                    scan = scan_records(buf)
                    if scan.consumed == 0:
                        break
                if scan.starts.shape[0]:
                    raw = np.frombuffer(buf, dtype=np.uint8)
                    self.ingest(decode_isolating(decoder, raw, scan.starts, scan.lengths), event_file.path)
                self.skipped_records += scan.skipped
                if self.on_bytes_read is not None:
                    self.on_bytes_read(scan.consumed)
                changed = changed or scan.consumed > 0 or scan.skipped > 0
                state.offset += scan.consumed
                state.resyncing = scan.resyncing
                if scan.consumed == 0:
                    break
        # Whatever is left (an unfinished last record) waits for the file to grow: not read again
        # until it does (for object storage, a request per refresh saved).
        state.waiting_at_size = size if state.offset < size else -1
        return changed

    def _skip_impossible_record(self, handle, state: FileState, size: int, claimed: int) -> bool:
        """Move past the record at `state.offset`, which claims more bytes than the file holds, when a
        complete valid record follows it; count and note what was skipped. False: wait for more."""
        probe_offset, probe_from = state.probe
        start = probe_from if probe_offset == state.offset else state.offset + 1
        found, resume_at = find_complete_record(handle, start, size)
        if found is None:
            state.probe = (state.offset, resume_at)
            return False
        skipped_bytes = found - state.offset
        self.skipped_records += 1
        args = {"file": self.storage.basename(state.file.path), "offset": state.offset,
                "claimed": claimed - FRAME_BYTES, "skipped": skipped_bytes, "found": found}
        self.add_note(
            "damaged_records",
            f"{args['file']}: the record at byte {state.offset:,} claims {claimed - FRAME_BYTES:,}"
            f" bytes, more than the file holds, yet a valid record follows it: {skipped_bytes:,} bytes skipped,"
            f" reading resumed at byte {found:,}.",
            args,
        )
        logger.warning("tb-health: %s: record at byte %d claims %d bytes; skipped %d bytes to the next valid record",
                       state.file.path, state.offset, claimed - FRAME_BYTES, skipped_bytes)
        if self.on_bytes_read is not None:
            self.on_bytes_read(skipped_bytes)
        state.offset = found
        state.probe = (-1, 0)
        return True


def find_complete_record(handle, start: int, size: int) -> tuple[int | None, int]:
    """(offset of the first complete, valid record at or after `start`, or None; where a later
    search may resume: the first candidate that a writer may still complete, or the end).

    Every position holding a valid header checksum is a candidate (checked with numpy, a window
    at a time); a candidate whose record fits in the file and whose payload checksum holds wins.
    """
    pos = start
    unresolved: int | None = None
    while pos + HEADER_BYTES <= size:
        handle.seek(pos)
        buf = handle.read(min(READ_CHUNK_BYTES, size - pos))
        raw = np.frombuffer(buf, dtype=np.uint8)
        last = len(buf) - HEADER_BYTES
        for window in range(0, last + 1, RESYNC_WINDOW):
            candidates = np.arange(window, min(window + RESYNC_WINDOW, last + 1), dtype=np.int64)
            for at in candidates[header_crc_ok(raw, candidates)].tolist():
                total = int.from_bytes(buf[at : at + 8], "little") + FRAME_BYTES
                if pos + at + total > size:
                    unresolved = pos + at if unresolved is None else unresolved
                    continue
                if at + total <= len(buf):
                    record = buf[at : at + total]
                else:
                    handle.seek(pos + at)
                    record = handle.read(total)
                payload = record[HEADER_BYTES : total - FOOTER_BYTES]
                if masked_crc(payload) == int.from_bytes(record[total - FOOTER_BYTES :], "little"):
                    return pos + at, pos + at
        pos += last + 1
    return None, pos if unresolved is None else unresolved


def decode_isolating(decoder, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> DecodedBatch:
    """Decode a batch; should the decoder raise on some record, decode the halves apart until the
    records that make it raise are isolated and counted as undecodable, so one bad record costs
    that record, not the rest of the chunk (and, through the file's failure, the rest of the file)."""
    try:
        return decoder.decode(raw, starts, lengths)
    except Exception:  # noqa: BLE001 - isolated below
        if starts.shape[0] == 1:
            logger.warning("tb-health: skipping a record the decoder could not handle", exc_info=True)
            return DecodedBatch(undecodable=1)
    middle = starts.shape[0] // 2
    first = decode_isolating(decoder, raw, starts[:middle], lengths[:middle])
    second = decode_isolating(decoder, raw, starts[middle:], lengths[middle:])
    return merge_batches(first, second, middle)


def merge_batches(first: DecodedBatch, second: DecodedBatch, offset: int) -> DecodedBatch:
    """Two batches decoded from consecutive records as one; `second`'s record indices start at `offset`."""
    for points in second.scalars:
        points.order = points.order + offset
    for point in [*second.histograms, *second.texts]:
        point.order += offset
    return DecodedBatch(
        scalars=[*first.scalars, *second.scalars],
        histograms=[*first.histograms, *second.histograms],
        texts=[*first.texts, *second.texts],
        undecodable=first.undecodable + second.undecodable,
        last_wall_time=max(first.last_wall_time, second.last_wall_time),
    )


def _whole_record_size(buf: bytes) -> int | None:
    if len(buf) < HEADER_BYTES:
        return None
    return int.from_bytes(buf[:8], "little") + FRAME_BYTES


class LogdirReader:
    """Reads every run under `logdir`; see the module docstring."""

    def __init__(self, logdir: str | os.PathLike, formats=FORMATS, heads_only: HeadsOnly | None = None) -> None:
        self.logdir = os.fspath(logdir)
        self.formats = tuple(formats)
        self.heads_only = heads_only
        self._read_in_full: set[str] = set()  # runs `read_in_full` asked for: never heads-only again
        self.storage = storage_for(self.logdir)
        self.problem: str | None = None  # why the last refresh could not read everything (a store failing)
        self._runs: dict[str, RunState] = {}
        self._runs_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self.reading: tuple[int, int] | None = None  # (runs read, runs found) while a refresh runs

    def refresh(self) -> bool:
        """Discover runs and files and read what is new. True if any run changed.

        Never raises for a failing store: `problem` says what failed (None after a full refresh);
        every run read before is kept, and the runs read in this refresh keep what they got."""
        with self._refresh_lock:
            try:
                changed = self._refresh()
                self.problem = None
            except StorageError as error:
                if str(error) != self.problem:
                    storage_logger.warning("tb-health: %s", error)
                self.problem = str(error)
                changed = False
            return changed

    def _refresh(self) -> bool:
        found = discover_runs(self.logdir, self.formats, self.storage)
        with self._runs_lock:
            previous = dict(self._runs)
        changed = bool(set(previous) - set(found))
        runs = {name: previous.get(name) for name in found}
        if self.storage.fetches_ahead:
            self.storage.prefetch(self._new_byte_ranges(found, runs))
        name = None
        try:
            for done, (name, files) in enumerate(found.items()):
                self.reading = (done, len(found))
                run = runs[name]
                new = run is None or run.needs_reset(files)
                if new:
                    run = runs[name] = RunState(name, run.writers if run is not None else None, self.storage,
                                                 self._keeps_points(name, len(found)))
                    changed = True
                with run.lock:
                    run.event_files = list(files)
                    if self._read_run(run, files):
                        run.touch()
                        changed = True
                    if new and run.keeps_points is not None:
                        run.compact()  # thousands of them, kept: their few whole series without spare capacity
                    plan = run.writer_plan(files)
                if plan != run.writers:  # a writer told apart only now: read the run again, keeping both
                    fresh = RunState(name, plan, self.storage, run.keeps_points)
                    with fresh.lock:
                        fresh.event_files = list(files)
                        self._read_run(fresh, files)
                    runs[name] = fresh
                    changed = True
        except StorageError:
            # The run being read when the store failed keeps its last state (a new one waits), as do
            # the runs not reached; the runs read whole keep what they got. Nothing shown is lost.
            if runs.get(name) is not previous.get(name):
                runs[name] = previous.get(name)
            with self._runs_lock:
                self._runs = {key: run for key, run in runs.items() if run is not None}
            raise
        finally:
            self.reading = None
        with self._runs_lock:
            self._runs = runs
        return changed

    def _keeps_points(self, name: str, runs_found: int) -> Callable[[str], bool] | None:
        """The heads-only predicate of a run about to be read (None: read it in full)."""
        policy = self.heads_only
        if policy is None or name in self._read_in_full or not policy.runs(name, runs_found):
            return None
        return policy.keeps_points

    def read_in_full(self, names: Iterable[str]) -> list[str]:
        """Read the runs among `names` that were read heads-only again with every point, in place
        (the same files, so the same data: their version stays); from now on they are read in
        full. Returns the names read again; unknown names are ignored."""
        again = []
        for name in names:
            with self._runs_lock:
                run = self._runs.get(name)
                self._read_in_full.add(name)
            if run is None:
                continue
            with run.lock:
                if run.keeps_points is None:
                    continue
                fresh = RunState(name, run.writers, run.storage)
                self._read_run(fresh, run.event_files)
                grew = any(state.offset != getattr(run.files.get(path), "offset", 0) for path, state in fresh.files.items())
                run.adopt(fresh)
                if grew:  # appended to since the last refresh: this is newer data
                    run.touch()
            again.append(name)
        return again

    def is_heads_only(self, name: str) -> bool:
        """Whether the run's scalars hold only their first and last points (see `HeadsOnly`)."""
        state = self._state(name)
        with state.lock:
            return state.keeps_points is not None

    def _new_byte_ranges(self, found: dict[str, list[EventFile]], runs: dict) -> list[tuple[str, int, int]]:
        """The first chunk each file's next read will ask for (for `Storage.prefetch`)."""
        ranges = []
        for name, files in found.items():
            run = runs.get(name)
            for event_file in files:
                size, _identity = self.storage.size(event_file.path)
                known = run.files.get(event_file.path) if run is not None else None
                offset = known.offset if known is not None else 0
                if known is not None and size == known.waiting_at_size:
                    continue
                if run is not None and run.failed_files.get(event_file.path) == size:
                    continue
                if size > offset:
                    ranges.append((event_file.path, offset, min(size, offset + READ_CHUNK_BYTES)))
        return ranges

    @staticmethod
    def _read_run(run: RunState, files: list[EventFile]) -> bool:
        changed = False
        for event_file in files:
            size, _identity = run.storage.size(event_file.path)
            if run.failed_files.get(event_file.path) == size:
                continue  # failed before and has not changed since: counted once
            known = run.files.get(event_file.path)
            if known is not None and size in (known.offset, known.waiting_at_size):
                continue  # nothing appended: no need to open it
            try:
                changed = run.read_new_bytes(event_file) or changed
                run.failed_files.pop(event_file.path, None)
            except StorageError:
                if changed:
                    run.touch()  # what was read before the store failed is kept and shown
                raise  # the store, not the file: the whole refresh is retried later
            except Exception:  # noqa: BLE001 - a bad file must never stop the other runs
                logger.warning("tb-health: skipping unreadable event file %s", event_file.path, exc_info=True)
                run.failed_files[event_file.path] = size
                run.skipped_records += 1
                changed = True
        return changed

    def run_names(self) -> list[str]:
        with self._runs_lock:
            return sorted(self._runs)

    def _state(self, name: str) -> RunState:
        with self._runs_lock:
            return self._runs[name]

    def run_state(self, name: str) -> RunState:
        """The reading state of one run, for saving it (`saved_state`); hold its `lock` while
        using it. KeyError for an unknown run."""
        return self._state(name)

    def take_saved_states(self, states: dict[str, RunState]) -> None:
        """Take saved reading states (`saved_state.load_run`) as the runs read so far: the next
        `refresh()` reads only what their files gained since."""
        with self._runs_lock:
            self._runs.update(states)

    def run(self, name: str) -> RunData:
        """An immutable snapshot of one run. KeyError for an unknown run."""
        state = self._state(name)
        with state.lock:
            return state.snapshot()

    def version(self, name: str) -> int:
        """Changes whenever the run's data changes (a cache key)."""
        state = self._state(name)
        with state.lock:
            return state.version

    def files_read(self, name: str) -> list[tuple[str, int]]:
        """(path, bytes read so far) of each event file of a run, for reports of what was read."""
        state = self._state(name)
        with state.lock:
            return [(path, file_state.offset) for path, file_state in sorted(state.files.items())]

    def compact(self) -> None:
        """Give back every column's spare capacity (for a reader that reads once and keeps the data)."""
        with self._runs_lock:
            runs = list(self._runs.values())
        for run in runs:
            with run.lock:
                run.compact()

    def memory_bytes(self) -> int:
        """Bytes held by the columnar buffers of every run (capacity, not just the used part)."""
        with self._runs_lock:
            runs = list(self._runs.values())
        return sum(run.nbytes() for run in runs)


def read_logdir(logdir: str | os.PathLike, formats=FORMATS, attempts: int = 1,
                on_retry: Callable[[str, float], None] | None = None) -> list[RunData]:
    """Read every run under `logdir` once.

    A store that fails is tried up to `attempts` times in all, waiting as `storage.Backoff` says
    (`on_retry(problem, wait_s)` before each wait); each attempt reads only what the ones before
    did not. `StorageError` when it still could not be read whole."""
    reader = LogdirReader(logdir, formats)
    refresh_fully(reader, attempts, on_retry)
    reader.compact()  # read once and kept: the spare capacity of the growing columns goes back
    return [reader.run(name) for name in reader.run_names()]


def refresh_fully(reader: LogdirReader, attempts: int = 1,
                  on_retry: Callable[[str, float], None] | None = None) -> None:
    """Refresh `reader` until everything was read, trying a failing store as `read_logdir` says."""
    backoff = Backoff()
    for attempt in range(1, attempts + 1):
        reader.refresh()
        if reader.problem is None:
            return
        if attempt < attempts:
            backoff.failed()
            if on_retry is not None:
                on_retry(reader.problem, backoff.wait_s(0.0))
            time.sleep(backoff.wait_s(0.0))
    raise StorageError(reader.problem)


def read_run(name: str, files: list[EventFile], on_bytes_read: Callable[[int], None] | None = None,
             storage: Storage | None = None) -> RunData:
    """Read one run's files once (for tools that go run by run, such as `tb-health convert`).

    `on_bytes_read(n)` is called after each chunk read, for progress reports. `storage` is the one
    the files were discovered through (local by default).
    """
    state = RunState(name, storage=storage)
    state.on_bytes_read = on_bytes_read
    LogdirReader._read_run(state, files)
    plan = state.writer_plan(files)
    if plan:
        state = RunState(name, plan, storage)
        LogdirReader._read_run(state, files)
    return state.snapshot()
