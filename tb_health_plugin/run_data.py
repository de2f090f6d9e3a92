"""Columnar containers for everything read from a run's logs.

Every reader (tfevents, MindSpore summary) produces these, and every consumer (analysis, plugin
routes, CLI) reads them. Arrays, not lists of point objects: a 1M-point series is three numpy
arrays, cheap to slice and to hand to the detectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tb_health_plugin.contract import is_samples_axis


@dataclass(frozen=True)
class ScalarSeries:
    """One scalar tag of one run: steps ascending and unique, NaN/Inf values kept as logged."""

    steps: np.ndarray  # int64
    wall_times: np.ndarray  # float64, seconds since the epoch
    values: np.ndarray  # float64

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @classmethod
    def from_lists(cls, steps, values, wall_times=None) -> ScalarSeries:
        steps_arr = np.asarray(steps, dtype=np.int64)
        if wall_times is None:
            wall_times = np.zeros(steps_arr.shape[0], dtype=np.float64)
        return cls(steps_arr, np.asarray(wall_times, dtype=np.float64), np.asarray(values, dtype=np.float64))


class ScalarHeads(ScalarSeries):
    """A scalar series read heads-only (the readers' `HeadsBuilder`): its first and last surviving points, the
    rest not kept. Enough for the run's step range and last logged step, not for any analysis of
    its points: whoever needs those asks the reader for the run in full (`LogdirReader.read_in_full`)."""


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram tag of one run.

    `buckets[i]` is a float64 array of shape (k, 3) holding (left edge, right edge, count) for
    the point at `steps[i]`: the one form that TensorBoard tensor histograms, legacy
    `HistogramProto` (right edges) and MindSpore's (left, width, count) buckets all convert to.
    `nan_counts`/`inf_counts` hold what MindSpore records separately (zeros for TensorBoard).
    """

    steps: np.ndarray  # int64
    wall_times: np.ndarray  # float64
    buckets: list[np.ndarray]
    nan_counts: np.ndarray  # int64
    inf_counts: np.ndarray  # int64 (positive and negative infinities together)

    def __len__(self) -> int:
        return int(self.steps.shape[0])


@dataclass(frozen=True)
class TextSeries:
    """One text tag of one run (for example the findings our hooks write live as JSON)."""

    steps: np.ndarray  # int64
    wall_times: np.ndarray  # float64
    values: list[str]

    def __len__(self) -> int:
        return int(self.steps.shape[0])


@dataclass(frozen=True)
class Backtrack:
    """Steps went backwards within a run (a resume from an earlier checkpoint).

    For the repeated steps the later write wins; this record lets the analysis report it.
    """

    tag: str
    from_step: int  # the last step logged before the jump back
    to_step: int  # the first step logged after it
    wall_time: float


@dataclass(frozen=True)
class ReadNote:
    """Something the reader had to decide about a run's data that its user should know (damage
    skipped, several writers told apart). The report shows each as an `info` finding."""

    kind: str  # "damaged_records", "multiple_writers"
    message: str  # in English, for the logs; the report writes `note.<kind>` of the catalogue from `args`
    args: dict[str, Any] = field(default_factory=dict, compare=False)  # a list: one clause an item


@dataclass
class RunData:
    """All series of one run, named as TensorBoard names the run."""

    name: str
    scalars: dict[str, ScalarSeries] = field(default_factory=dict)
    histograms: dict[str, HistogramSeries] = field(default_factory=dict)
    texts: dict[str, TextSeries] = field(default_factory=dict)
    backtracks: list[Backtrack] = field(default_factory=list)
    skipped_records: int = 0  # records with a bad checksum or undecodable payload
    last_wall_time: float = 0.0
    notes: list[ReadNote] = field(default_factory=list)

    def step_range(self) -> tuple[int, int] | None:
        """First and last logged step over every scalar series on the step axis, or None without
        data (a `loss vs samples` twin counts samples, not steps: `contract.is_samples_axis`)."""
        on_steps = [s for tag, s in self.scalars.items() if len(s) and not is_samples_axis(tag)]
        firsts = [int(s.steps[0]) for s in on_steps]
        lasts = [int(s.steps[-1]) for s in on_steps]
        if not firsts:
            return None
        return min(firsts), max(lasts)
