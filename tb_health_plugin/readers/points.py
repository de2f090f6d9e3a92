"""What a decoder hands to the accumulator: the points of a batch of records, in write order.

Scalars are columnar (a tag table plus arrays) because they are the bulk of every log; the rarer
histogram and text points are small tuples. `order` is the record index inside the batch, so
points decoded by different paths (vectorised and protobuf) merge back into write order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ScalarPoints:
    tags: list[str]  # tag table; `tag_ids` index into it
    tag_ids: np.ndarray  # int64
    order: np.ndarray  # int64 record index within the batch
    steps: np.ndarray  # int64
    wall_times: np.ndarray  # float64
    values: np.ndarray  # float64

    @classmethod
    def from_lists(cls, tags: list[str], order: list[int], steps: list[int], wall_times: list[float],
                   values: list[float]) -> ScalarPoints:
        table: dict[str, int] = {}
        tag_ids = [table.setdefault(tag, len(table)) for tag in tags]
        return cls(
            list(table), np.asarray(tag_ids, np.int64), np.asarray(order, np.int64),
            np.asarray(steps, np.int64), np.asarray(wall_times, np.float64), np.asarray(values, np.float64),
        )

    def __len__(self) -> int:
        return int(self.steps.shape[0])


@dataclass
class HistogramPoint:
    tag: str
    order: int
    step: int
    wall_time: float
    buckets: np.ndarray  # (k, 3) float64: left edge, right edge, count
    nan_count: int = 0
    inf_count: int = 0


@dataclass
class TextPoint:
    tag: str
    order: int
    step: int
    wall_time: float
    text: str


def latest_wall_time(current: float, wall_times) -> float:
    """The latest finite wall time among `current` and `wall_times`.

    A single `inf` or NaN wall time (a broken clock, a damaged record) would otherwise become the
    run's "last update" and cannot be sent as JSON; the point itself keeps its value.
    """
    times = np.asarray(wall_times, dtype=np.float64)
    finite = times[np.isfinite(times)]
    return max(current, float(finite.max())) if finite.shape[0] else current


INT64_MAX = (1 << 63) - 1


def clamp_count(count: int) -> int:
    """A histogram count as a non-negative int64: a count past int64 (two int64 counts added, or
    an overflowed varint read back negative) is damage, kept as the largest count we can hold."""
    return min(max(int(count), 0), INT64_MAX)


@dataclass
class DecodedBatch:
    scalars: list[ScalarPoints] = field(default_factory=list)
    histograms: list[HistogramPoint] = field(default_factory=list)
    texts: list[TextPoint] = field(default_factory=list)
    undecodable: int = 0  # records whose payload did not parse
    last_wall_time: float = 0.0

    def scalars_by_tag(self):
        """Yield (tag, steps, wall_times, values) per tag, each in write order."""
        parts = [p for p in self.scalars if len(p)]
        if not parts:
            return
        table: dict[str, int] = {}
        ids = []
        for part in parts:
            remap = np.asarray([table.setdefault(tag, len(table)) for tag in part.tags], np.int64)
            ids.append(remap[part.tag_ids])
        tag_ids = np.concatenate(ids)
        order = np.concatenate([p.order for p in parts])
        steps = np.concatenate([p.steps for p in parts])
        wall_times = np.concatenate([p.wall_times for p in parts])
        values = np.concatenate([p.values for p in parts])
        # Group by tag, keeping write order inside each tag (stable sort on tag, then order).
        if np.all(order[1:] >= order[:-1]):  # one decoding path, or paths that did not interleave
            # already in write order: a stable sort on the tag alone, by radix on a small key
            arrangement = np.argsort(tag_ids.astype(np.uint16) if len(table) <= 1 << 16 else tag_ids, kind="stable")
        else:
            arrangement = np.lexsort((order, tag_ids))
        tag_ids = tag_ids[arrangement]
        bounds = np.flatnonzero(np.diff(tag_ids)) + 1
        names = list(table)
        for segment in np.split(np.arange(tag_ids.shape[0]), bounds):
            picked = arrangement[segment]
            yield names[int(tag_ids[segment[0]])], steps[picked], wall_times[picked], values[picked]
