"""Which files under a logdir are event files, which run each belongs to, and their read order.

TensorBoard's rules: a file is an event file when its name contains "tfevents" (minus the
`.profile-empty` placeholders); a run is a folder that directly holds event files, named by its
path relative to the logdir with `/` separators, `.` for the logdir itself. We add MindSpore's
summary files, `events.out.events.summary.<time>.<device>.<host>_MS`; their `_lineage` siblings
hold lineage records (hyper-parameters, final metrics), not time series, and are skipped.

`tb-health convert` may write its tfevents copies (`*.tb-health-convert`) next to the MindSpore
files they come from; in a run that still has those MindSpore files the copies are skipped, so
no point is read twice.

Only regular files are event files (symlinks to them included; one that cannot be looked at is
kept, so that reading it fails and is counted): a FIFO, socket or device named
like one would block or never end on open or read. The tree is walked with an explicit stack, so
its depth is bounded by the file system, not by Python's recursion limit; symlinked folders are
not followed (as `os.walk` does not), so a link cycle cannot loop.

Files of a run are read in the order they were started: by the timestamp in their name, then by
name with numbers compared as numbers, so a resumed training's later file comes after the file
it resumes.

The folders come from a `storage.Storage`: the local file system walked as above, or one listing
of an object-store prefix (`s3://bucket/prefix`), where the same naming rules apply.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass

from tb_health_plugin.readers.storage import Storage, storage_for, unreadable_folder, walk_folders  # noqa: F401 (re-exported)

logger = logging.getLogger(__name__)

TFEVENTS, MINDSPORE = "tfevents", "mindspore"
FORMATS = (TFEVENTS, MINDSPORE)
CONVERTED_SUFFIX = ".tb-health-convert"  # tfevents written by `tb-health convert`
_MINDSPORE_SUMMARY = re.compile(r"^events\.out\.events\.summary\.\d+.*_MS$")
_START_TIME = re.compile(r"(?:tfevents|summary)\.(\d+)")
_DIGIT_RUNS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class EventFile:
    path: str
    format: str  # TFEVENTS or MINDSPORE

    @property
    def sort_key(self) -> tuple:
        name = os.path.basename(self.path)
        match = _START_TIME.search(name)
        return (int(match.group(1)) if match else 0, natural_key(name))


def natural_key(name: str) -> tuple:
    """Numbers inside the name compare as numbers (writer counters: `...pid.10` after `...pid.9`)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGIT_RUNS.split(name) if part)


def event_file_format(name: str) -> str | None:
    """TFEVENTS, MINDSPORE or None for a file name."""
    if "tfevents" in name:
        return None if name.endswith(".profile-empty") else TFEVENTS
    if _MINDSPORE_SUMMARY.match(name):
        return MINDSPORE
    return None


def is_special_file(path: str) -> bool:
    """True for a FIFO, socket, device or folder (through symlinks too); never opens it (a FIFO
    would block). A file that cannot be looked at is not special: reading it fails and is counted."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def discover_runs(logdir: str, formats=FORMATS, storage: Storage | None = None) -> dict[str, list[EventFile]]:
    """Map each run name to its event files in read order. A missing logdir has no runs.

    `storage` defaults to the one for `logdir` (local, or fsspec for a URL); a store that cannot
    be listed raises `storage.StorageError`."""
    storage = storage if storage is not None else storage_for(logdir)
    runs: dict[str, list[EventFile]] = {}
    for folder, _subfolders, names in storage.listing(logdir):
        kinds = {name: event_file_format(name) for name in names}
        kinds = {name: kind for name, kind in kinds.items()
                 if kind is None or storage.is_regular(storage.join(folder, name))}
        has_mindspore = MINDSPORE in kinds.values()
        files = [
            EventFile(storage.join(folder, name), kind)
            for name, kind in kinds.items()
            if kind in formats and not (has_mindspore and kind == TFEVENTS and name.endswith(CONVERTED_SUFFIX))
        ]
        if any(kind in formats for kind in kinds.values()):
            runs[storage.relative(logdir, folder)] = sorted(files, key=lambda f: f.sort_key)
    return runs




