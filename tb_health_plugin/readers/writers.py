"""Telling apart several processes that wrote one run folder at the same time.

Every writer (TensorBoard's `EventFileWriter`, tensorboardX, MindSpore's `SummaryRecord`) opens its
own event file, so two trainings logging into one folder leave two files. Read in order and merged
by tag, the later file's steps go back, which is exactly what a resume from a checkpoint looks
like: the resume rule keeps the later write and drops the other process's points. What tells the
two apart is time: a resumed training starts its file after the previous one stopped writing,
while two writers write at the same time.

So two files are *concurrent writers* when their wall-time spans overlap (strictly: a file that
starts the second the other stops is a resume) **and** they log a common tag over overlapping
steps. Files that log different tags at the same time (a training's summary file next to the
hooks' file, say) merge without loss and stay one writer; so do files that do not overlap in time,
whatever their steps (the resume rule applies unchanged).

Files are assigned, in read order, to the first writer none of whose files they are concurrent
with; writer 1 keeps the tag names, writer k > 1 gets its tags suffixed with `WRITER_SUFFIX`, so
both series are kept and nothing of one is dropped as a "resume" of the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

WRITER_SUFFIX = " (writer {number})"


@dataclass
class FileSpan:
    """What one file logged: its wall-time span (finite times only) and each tag's step range."""

    first_wall: float = np.inf
    last_wall: float = -np.inf
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, tag: str, steps: np.ndarray, wall_times: np.ndarray) -> None:
        if steps.shape[0] == 0:
            return
        low, high = int(steps.min()), int(steps.max())
        known = self.steps.get(tag)
        self.steps[tag] = (low, high) if known is None else (min(known[0], low), max(known[1], high))
        finite = wall_times[np.isfinite(wall_times)]
        if finite.shape[0]:
            self.first_wall = min(self.first_wall, float(finite.min()))
            self.last_wall = max(self.last_wall, float(finite.max()))


def concurrent(a: FileSpan, b: FileSpan) -> bool:
    """Both files wrote at the same time and logged a common tag over overlapping steps."""
    if not (a.first_wall < b.last_wall and b.first_wall < a.last_wall):
        return False
    return any(
        tag in b.steps and a.steps[tag][0] <= b.steps[tag][1] and b.steps[tag][0] <= a.steps[tag][1]
        for tag in a.steps
    )


def assign_writers(paths: list[str], spans: dict[str, FileSpan]) -> dict[str, int]:
    """Writer index (0 = the first) of each path, in read order; only paths of writers past the first."""
    writers: list[list[FileSpan]] = []
    plan: dict[str, int] = {}
    for path in paths:
        span = spans.get(path)
        if span is None or not span.steps:
            continue
        index = next((i for i, members in enumerate(writers)
                      if not any(concurrent(span, other) for other in members)), len(writers))
        if index == len(writers):
            writers.append([])
        writers[index].append(span)
        if index:
            plan[path] = index
    return plan


def writer_tag(tag: str, writer: int) -> str:
    return tag if writer == 0 else tag + WRITER_SUFFIX.format(number=writer + 1)


def writers_note(plan: dict[str, int]) -> tuple[str, dict] | None:
    """The report's note about a run written by several processes at once (in English, and the
    arguments of the catalogue's `note.multiple_writers`), or None."""
    if not plan:
        return None
    count = max(plan.values()) + 1
    writers = [
        {
            "writer": index + 1,
            "suffix": WRITER_SUFFIX.format(number=index + 1),
            "files": ", ".join(sorted(os.path.basename(p) for p, w in plan.items() if w == index)),
        }
        for index in range(1, count)
    ]
    later = "; ".join(f"writer {w['writer']}'s under tags ending in '{w['suffix']}' ({w['files']})" for w in writers)
    return (
        f"{count} processes seem to have written this run at the same time: their event files overlap in wall"
        f" time and log the same tags at the same steps. All are kept, {later}; the checks look at writer 1's.",
        {"count": count, "writers": writers},
    )
