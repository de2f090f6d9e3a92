"""Per-tag series that grow as records are read, with TensorBoard's resume semantics.

Points of one tag arrive in write order (files of a run in order, records in file order). The
rule for scalars and histograms, applied in batches with numpy (text is an event log, see
`TextBuilder`):
- a step equal to the previous one replaces it (MindSpore writes the epoch-end step twice);
- a step below the previous one is a resume from an earlier checkpoint: every point already
  held at or after that step is dropped (the later write wins) and a `Backtrack` is recorded.
Equivalently: a point survives iff no later point of the tag has a step at or below its own
(`tb_health_plugin/resume.py`, the rule the hooks' online analysis applies too).

Columns grow geometrically; truncation allocates a fresh buffer instead of overwriting, so the
read-only views handed out in snapshots never change under their holders.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.resume import surviving_points
from tb_health_plugin.run_data import Backtrack, HistogramSeries, ScalarHeads, ScalarSeries, TextSeries

_MIN_CAPACITY = 16


class GrowableColumn:
    """A numpy column with amortised O(1) appends and snapshot-safe views."""

    def __init__(self, dtype) -> None:
        self._data = np.empty(_MIN_CAPACITY, dtype=dtype)
        self.size = 0

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @classmethod
    def holding(cls, values: np.ndarray, dtype) -> GrowableColumn:
        """A column whose content is a copy of `values` (a saved state read back)."""
        column = cls(dtype)
        column.extend(np.asarray(values, dtype=dtype))
        return column

    def extend(self, values: np.ndarray) -> None:
        needed = self.size + values.shape[0]
        if needed > self._data.shape[0]:
            grown = np.empty(max(needed, 2 * self._data.shape[0]), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : needed] = values
        self.size = needed

    def truncate(self, size: int) -> None:
        if size < self.size:
            fresh = np.empty(self._data.shape[0], dtype=self._data.dtype)
            fresh[:size] = self._data[:size]
            self._data, self.size = fresh, size

    def compact(self) -> None:
        """Give back the spare capacity (up to half the buffer after a doubling): for readers
        that read once and keep the data, such as the CLI. Views handed out keep the old buffer."""
        if self._data.shape[0] > max(self.size, _MIN_CAPACITY):
            self._data = self._data[: self.size].copy()

    def view(self) -> np.ndarray:
        out = self._data[: self.size]
        out.flags.writeable = False
        return out

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)


class _SeriesBuilder:
    """Steps and wall times, plus whatever columns a subclass keeps in step with them."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.steps = GrowableColumn(np.int64)
        self.wall_times = GrowableColumn(np.float64)

    def _last_step(self) -> int | None:
        return int(self.steps._data[self.steps.size - 1]) if self.steps.size else None

    def _merge(self, steps: np.ndarray, wall_times: np.ndarray) -> tuple[np.ndarray, int, list[Backtrack]]:
        """Apply the resume rule; return the batch mask to append, the size to cut back to and backtracks."""
        previous = np.empty_like(steps)
        last = self._last_step()
        previous[0] = steps[0] if last is None else last
        previous[1:] = steps[:-1]
        backtracks = [
            Backtrack(self.tag, int(previous[i]), int(steps[i]), float(wall_times[i]))
            for i in np.flatnonzero(steps < previous)
        ]
        keep = surviving_points(steps)
        held = self.steps._data[: self.steps.size]
        cut = int(np.searchsorted(held, steps.min(), side="left")) if held.shape[0] else 0
        return keep, cut, backtracks

    def nbytes(self) -> int:
        return self.steps.nbytes + self.wall_times.nbytes

    def columns(self) -> dict[str, GrowableColumn]:
        """Every numpy column of the series by attribute name (for compaction and saved states)."""
        return {name: value for name, value in vars(self).items() if isinstance(value, GrowableColumn)}

    def compact(self) -> None:
        for column in self.columns().values():
            column.compact()


class ScalarBuilder(_SeriesBuilder):
    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.values = GrowableColumn(np.float64)

    def extend(self, steps: np.ndarray, wall_times: np.ndarray, values: np.ndarray) -> list[Backtrack]:
        if steps.shape[0] == 0:
            return []
        last = self._last_step()
        if (last is None or steps[0] > last) and (steps.shape[0] == 1 or bool(np.all(steps[1:] > steps[:-1]))):
            backtracks: list[Backtrack] = []  # the common case: strictly increasing past the end
        else:
            keep, cut, backtracks = self._merge(steps, wall_times)
            for column in (self.steps, self.wall_times, self.values):
                column.truncate(cut)
            steps, wall_times, values = steps[keep], wall_times[keep], values[keep]
        self.steps.extend(steps)
        self.wall_times.extend(wall_times)
        self.values.extend(values)
        return backtracks

    def snapshot(self) -> ScalarSeries:
        return ScalarSeries(self.steps.view(), self.wall_times.view(), self.values.view())

    def nbytes(self) -> int:
        return super().nbytes() + self.values.nbytes


class _ObjectSeriesBuilder(_SeriesBuilder):
    """Series whose per-point payload is a Python object (histogram buckets, text)."""

    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.objects: list = []

    def _extend_objects(self, steps: np.ndarray, wall_times: np.ndarray, objects: list) -> tuple[np.ndarray, list[Backtrack]]:
        keep = np.ones(steps.shape[0], dtype=bool)
        backtracks: list[Backtrack] = []
        last = self._last_step()
        if not ((last is None or steps[0] > last) and bool(np.all(steps[1:] > steps[:-1]))):
            keep, cut, backtracks = self._merge(steps, wall_times)
            self._truncate(cut)
        self.steps.extend(steps[keep])
        self.wall_times.extend(wall_times[keep])
        self.objects.extend(obj for obj, kept in zip(objects, keep, strict=True) if kept)
        return keep, backtracks

    def _truncate(self, size: int) -> None:
        self.steps.truncate(size)
        self.wall_times.truncate(size)
        del self.objects[size:]


class HistogramBuilder(_ObjectSeriesBuilder):
    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.nan_counts = GrowableColumn(np.int64)
        self.inf_counts = GrowableColumn(np.int64)

    def _truncate(self, size: int) -> None:
        super()._truncate(size)
        self.nan_counts.truncate(size)
        self.inf_counts.truncate(size)

    def extend(self, steps, wall_times, buckets: list[np.ndarray], nan_counts, inf_counts) -> list[Backtrack]:
        if len(buckets) == 0:
            return []
        keep, backtracks = self._extend_objects(
            np.asarray(steps, np.int64), np.asarray(wall_times, np.float64), buckets
        )
        self.nan_counts.extend(np.asarray(nan_counts, np.int64)[keep])
        self.inf_counts.extend(np.asarray(inf_counts, np.int64)[keep])
        return backtracks

    def snapshot(self) -> HistogramSeries:
        return HistogramSeries(
            self.steps.view(), self.wall_times.view(), list(self.objects),
            self.nan_counts.view(), self.inf_counts.view(),
        )


class TextBuilder(_ObjectSeriesBuilder):
    """Text is an event log (our hooks write each finding at the step it points to, which can be
    earlier than the last one): every entry is kept, ordered by step then write order, and steps
    going back are no resume. Scalars and histograms show resumes."""

    def extend(self, steps, wall_times, texts: list[str]) -> list[Backtrack]:
        if len(texts) == 0:
            return []
        steps = np.asarray(steps, np.int64)
        wall_times = np.asarray(wall_times, np.float64)
        last = self._last_step()
        if (last is not None and steps[0] < last) or bool(np.any(steps[1:] < steps[:-1])):
            steps = np.concatenate([self.steps.view(), steps])
            wall_times = np.concatenate([self.wall_times.view(), wall_times])
            texts = [*self.objects, *texts]
            order = np.argsort(steps, kind="stable")
            steps, wall_times, texts = steps[order], wall_times[order], [texts[i] for i in order.tolist()]
            self._truncate(0)
        self.steps.extend(steps)
        self.wall_times.extend(wall_times)
        self.objects.extend(texts)
        return []

    def snapshot(self) -> TextSeries:
        return TextSeries(self.steps.view(), self.wall_times.view(), list(self.objects))


class HeadsBuilder:
    """A scalar tag's first and last surviving points only, under the same resume rule as
    `ScalarBuilder`, which gives the same first and last points and the same backtracks: the last
    point written always survives and is the last, the first is the lowest step written (its last
    write), and a batch's points are compared with the last step held, which both hold. Held in
    arrays of exactly those points (a growable column's spare capacity would cost more)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.steps = np.empty(0, np.int64)
        self.wall_times = np.empty(0, np.float64)
        self.values = np.empty(0, np.float64)

    def extend(self, steps: np.ndarray, wall_times: np.ndarray, values: np.ndarray) -> list[Backtrack]:
        if steps.shape[0] == 0:
            return []
        previous = np.concatenate([self.steps[-1:], steps[:-1]]) if self.steps.shape[0] else np.concatenate([steps[:1], steps[:-1]])
        backtracks = [Backtrack(self.tag, int(previous[i]), int(steps[i]), float(wall_times[i]))
                      for i in np.flatnonzero(steps < previous)]
        steps = np.concatenate([self.steps, steps])
        wall_times = np.concatenate([self.wall_times, wall_times])
        values = np.concatenate([self.values, values])
        survivors = np.flatnonzero(surviving_points(steps))
        ends = survivors[[0, -1]] if survivors.shape[0] > 1 else survivors
        self.steps, self.wall_times, self.values = steps[ends], wall_times[ends], values[ends]
        for column in (self.steps, self.wall_times, self.values):
            column.flags.writeable = False  # handed out in snapshots; replaced, never written, by the next batch
        return backtracks

    def snapshot(self) -> ScalarHeads:
        return ScalarHeads(self.steps, self.wall_times, self.values)

    def nbytes(self) -> int:
        return int(self.steps.nbytes + self.wall_times.nbytes + self.values.nbytes)

    def compact(self) -> None:
        """Nothing to give back."""
