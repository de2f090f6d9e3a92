"""One labelled case of the detection benchmark.

A case writes one run's logs into a folder and states which finding kinds must be reported at
which steps. Healthy cases (benign traps) expect nothing at warning or critical severity.
Case generators live in `bench/detection/cases_*.py`, each exposing `cases(split)`, where
`split` is "dev" (used while designing the detectors), "holdout" (fresh seeds and shapes,
never looked at while tuning) or, for the zoo only, "sealed" (run once, at integration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str  # unique; becomes the run folder name
    write: Callable[[Path], None]  # writes the run's event files into this folder
    expected: dict[str, list[int]] = field(default_factory=dict)  # kind -> labelled steps
    family: str = "synthetic"  # "synthetic", "mindspore" (trained for real) or "zoo" (randomised trainings)
    creep: bool = False  # a divergence that rises slowly (its onset delay is scored as a share of the run)
    steps: int | None = None  # the run's length in steps, for delays as a share of the run
    note: str = ""  # what the run is, printed next to its mistakes

    @property
    def healthy(self) -> bool:
        return not self.expected
