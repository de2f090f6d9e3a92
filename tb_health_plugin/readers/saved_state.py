"""A run's reading state saved to one file and read back, so a later read resumes where it stopped.

What is saved is everything `logdir_reader.RunState` holds (`SAVED_RUN_FIELDS`): per event file the byte offset read
up to (and the rest of its reading state), every series as numpy columns, backtracks, notes,
skipped-record counts, the writer plan and each file's `FileSpan`. Read back, the state is
exactly what a reader that had read those bytes itself would hold, so the next `refresh()`
reads only the bytes appended since and ends where a full read would (resume rule included:
`accumulate` applies it to the appended batch against the saved columns, as it would have).

Nothing saved is trusted on its word: each event file that was read from must still be the same
file, grown at most: same device and inode, not smaller than the offset, the same bytes at the
start and just before the offset (SHA-256 of `CHECKED_BYTES` at each place), and not modified
in place (same size with another modification time). Anything else, or a saved state that cannot
be parsed, raises `UnusableState` and the run is read again in full.

A file is a JSON header followed by the raw bytes of the numpy columns (read back with one read
and no unpickling), written to a temporary name and renamed into place, so a reader sees a whole
state or none even with several writers.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np

from tb_health_plugin.readers.accumulate import GrowableColumn, HistogramBuilder, ScalarBuilder, TextBuilder
from tb_health_plugin.readers.discovery import EventFile
from tb_health_plugin.readers.logdir_reader import FileState, RunState
from tb_health_plugin.readers.storage import LocalStorage
from tb_health_plugin.readers.writers import FileSpan
from tb_health_plugin.run_data import Backtrack, ReadNote

STATE_FORMAT = 2  # bump when what is saved changes meaning
MAGIC = b"tb-health run state\n"
CHECKED_BYTES = 4096  # hashed at the start of a file and just before its offset

_BUILDERS = {"scalar": ScalarBuilder, "histogram": HistogramBuilder, "text": TextBuilder}
# Every attribute of a `RunState` is either saved or rebuilt fresh on loading; a field added to
# the reader must be added to one of these (a test compares them with a fresh state's attributes).
SAVED_RUN_FIELDS = frozenset({
    "name", "writers", "spans", "files", "failed_files", "scalars", "histograms", "texts", "backtracks",
    "notes", "skipped_records", "last_wall_time", "tfevents_decoder",  # the decoder: its plugin_by_tag
})
FRESH_RUN_FIELDS = frozenset({
    "storage", "lock", "mindspore_decoder", "version", "_snapshot", "on_bytes_read",  # no reading state
    "event_files",  # discovered again by every refresh
    "keeps_points",  # always None here: a heads-only state (triage's) is not saved
})
SAVED_FILE_FIELDS = frozenset({"file", "offset", "resyncing", "identity", "probe", "waiting_at_size"})


class UnusableState(Exception):
    """The saved state cannot stand for the run's files any more (or could not be read)."""


def _digest(handle, start: int, stop: int) -> str:
    handle.seek(start)
    return hashlib.sha256(handle.read(max(0, stop - start))).hexdigest()


def file_fingerprint(path: str, offset: int) -> dict:
    """Identity of an event file and of the bytes read from it up to `offset`."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        return {
            "device": info.st_dev, "inode": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "head": _digest(handle, 0, min(offset, CHECKED_BYTES)),
            "tail": _digest(handle, max(0, offset - CHECKED_BYTES), offset),
        }


def _same_file(path: str, offset: int, saved: dict) -> str | None:
    """Why the file at `path` is not the one read up to `offset` (grown at most), or None."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if (info.st_dev, info.st_ino) != (saved["device"], saved["inode"]):
                return "replaced"
            if info.st_size < offset:
                return "truncated"
            if info.st_size == saved["size"] and info.st_mtime_ns != saved["mtime_ns"]:
                return "rewritten in place"
            if _digest(handle, 0, min(offset, CHECKED_BYTES)) != saved["head"] or \
                    _digest(handle, max(0, offset - CHECKED_BYTES), offset) != saved["tail"]:
                return "rewritten"
    except OSError:
        return "gone"
    return None


def save_run(state: RunState, path: str, code: str, token: str) -> None:
    """Write `state` (a local run's, not being read meanwhile) to `path` atomically, with `token`
    naming its data (whoever reads it back gets the token of exactly this data)."""
    if state.keeps_points is not None:
        raise ValueError("a run read heads-only is not saved: its points are not all there")
    arrays: dict[str, np.ndarray] = {}
    series = []
    for kind, builders in (("scalar", state.scalars), ("histogram", state.histograms), ("text", state.texts)):
        for tag, builder in builders.items():
            key = f"s{len(series)}"
            entry = {"kind": kind, "tag": tag, "columns": sorted(builder.columns())}
            for name, column in builder.columns().items():
                arrays[f"{key}_{name}"] = column.view()
            if kind == "histogram":
                buckets = builder.objects
                arrays[f"{key}_bucket_rows"] = np.asarray([b.shape[0] for b in buckets], np.int64)
                arrays[f"{key}_buckets"] = (np.concatenate(buckets).reshape(-1, 3) if buckets
                                            else np.zeros((0, 3), np.float64)).astype(np.float64)
            elif kind == "text":
                entry["texts"] = list(builder.objects)
            series.append(entry)
    files = []
    for file_path, file_state in state.files.items():
        files.append({
            "path": file_path, "format": file_state.file.format, "offset": file_state.offset,
            "resyncing": file_state.resyncing, "probe": list(file_state.probe),
            "waiting_at_size": file_state.waiting_at_size,
            "identity": list(file_state.identity) if file_state.identity is not None else None,
            "fingerprint": file_fingerprint(file_path, file_state.offset),
        })
    meta = {
        "format": STATE_FORMAT, "code": code, "token": token, "name": state.name, "writers": state.writers,
        "files": files, "failed_files": state.failed_files, "series": series,
        "spans": {p: {"first_wall": s.first_wall, "last_wall": s.last_wall,
                      "steps": {t: list(r) for t, r in s.steps.items()}} for p, s in state.spans.items()},
        "backtracks": [[b.tag, b.from_step, b.to_step, b.wall_time] for b in state.backtracks],
        "notes": [[n.kind, n.message, n.args] for n in state.notes.values()],  # args: the catalogue's figures
        "skipped_records": state.skipped_records, "last_wall_time": state.last_wall_time,
        "plugin_by_tag": state.tfevents_decoder.plugin_by_tag,
    }
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".state-", suffix=".state")
    try:
        with os.fdopen(handle, "wb") as out:
            _write_arrays(out, meta, arrays)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _write_arrays(out, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """`MAGIC`, the header's length (8 bytes), the JSON header (`meta` plus where each array
    lies), then each array's raw bytes, 8-byte aligned: read back with one read, no unpickling."""
    layout, offset = {}, 0
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        layout[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}
        offset += -(-array.nbytes // 8) * 8
    header = json.dumps({"meta": meta, "arrays": layout}).encode()
    out.write(MAGIC + len(header).to_bytes(8, "little") + header)
    for array in arrays.values():
        data = np.ascontiguousarray(array).tobytes()
        out.write(data + b"\0" * (-len(data) % 8))


def _read_arrays(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    with open(path, "rb") as handle:
        blob = handle.read()
    if blob[: len(MAGIC)] != MAGIC:
        raise ValueError("not a saved run state")
    size = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    header = json.loads(blob[start : start + size])
    body = memoryview(blob)[start + size :]
    arrays = {}
    for name, where in header["arrays"].items():
        dtype, shape = np.dtype(where["dtype"]), tuple(where["shape"])
        if dtype.hasobject:
            raise ValueError("object arrays are not saved states")
        count = int(np.prod(shape, dtype=np.int64))
        arrays[name] = np.frombuffer(body, dtype=dtype, count=count, offset=where["offset"]).reshape(shape)
    return header["meta"], arrays


def load_run(path: str, code: str) -> tuple[RunState, str]:
    """The saved state of a local run, checked against its files, and its data token;
    `UnusableState` says why not."""
    try:
        meta, arrays = _read_arrays(path)
        if meta.get("format") != STATE_FORMAT or meta.get("code") != code:
            raise UnusableState("saved by another version of tb-health")
        token = meta["token"]
        if not isinstance(token, str) or not token:
            raise UnusableState("unreadable (no data token)")
        return _rebuild(meta, arrays), token
    except UnusableState:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        raise UnusableState(f"unreadable ({type(error).__name__}: {error})") from None


def _rebuild(meta: dict, arrays: dict[str, np.ndarray]) -> RunState:
    for saved in meta["files"]:
        if saved["offset"]:
            problem = _same_file(saved["path"], saved["offset"], saved["fingerprint"])
            if problem is not None:
                raise UnusableState(f"{os.path.basename(saved['path'])} {problem}")
    state = RunState(meta["name"], meta["writers"], LocalStorage())
    state.notes = {message: ReadNote(kind, message, args) for kind, message, args in meta["notes"]}
    for saved in meta["files"]:
        if not saved["offset"]:
            continue  # nothing read from it: seen afresh, as a new file (its place in the read order counts)
        file_state = FileState(EventFile(saved["path"], saved["format"]))
        file_state.offset, file_state.resyncing = int(saved["offset"]), bool(saved["resyncing"])
        file_state.probe = tuple(saved["probe"])
        file_state.waiting_at_size = int(saved["waiting_at_size"])
        file_state.identity = tuple(saved["identity"]) if saved["identity"] is not None else None
        state.files[saved["path"]] = file_state
    state.failed_files = {p: int(size) for p, size in meta["failed_files"].items()}
    for index, entry in enumerate(meta["series"]):
        key = f"s{index}"
        builder = _BUILDERS[entry["kind"]](entry["tag"])
        for name in entry["columns"]:
            column = getattr(builder, name)
            setattr(builder, name, GrowableColumn.holding(arrays[f"{key}_{name}"], column.dtype))
        if entry["kind"] == "histogram":
            rows = arrays[f"{key}_bucket_rows"]
            builder.objects = np.split(arrays[f"{key}_buckets"].copy(), np.cumsum(rows)[:-1]) if rows.shape[0] else []
        elif entry["kind"] == "text":
            builder.objects = list(entry["texts"])
        sizes = {getattr(builder, name).size for name in entry["columns"]}
        if entry["kind"] != "scalar":
            sizes.add(len(builder.objects))
        if len(sizes) != 1:
            raise UnusableState("columns of unequal length")
        {"scalar": state.scalars, "histogram": state.histograms, "text": state.texts}[entry["kind"]][entry["tag"]] = builder
    state.spans = {p: FileSpan(s["first_wall"], s["last_wall"], {t: tuple(r) for t, r in s["steps"].items()})
                   for p, s in meta["spans"].items()}
    state.backtracks = [Backtrack(tag, int(a), int(b), float(w)) for tag, a, b, w in meta["backtracks"]]
    state.skipped_records = int(meta["skipped_records"])
    state.last_wall_time = float(meta["last_wall_time"])
    state.tfevents_decoder.plugin_by_tag = dict(meta["plugin_by_tag"])
    return state


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
