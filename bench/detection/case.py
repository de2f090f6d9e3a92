"""One labelled case of the detection benchmark, and the seeding every simulated family shares.

A case writes one run's logs into a folder and states which finding kinds must be reported at
which steps. Healthy cases (benign traps) expect nothing at warning or critical severity.
Case generators live in `bench/detection/cases_*.py`, each exposing `cases(split)`, where
`split` is "dev" (used while designing the detectors), "holdout" (fresh seeds and shapes,
never looked at while tuning) or, for the zoo only, "sealed" (run once, at integration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str  # unique; becomes the run folder name
    write: Callable[[Path], None]  # writes the run's event files into this folder
    expected: dict[str, list[int]] = field(default_factory=dict)  # kind -> labelled steps
    family: str = "synthetic"  # "synthetic", "mindspore" (trained for real) or "zoo" (randomised trainings)
    creep: bool = False  # a divergence that rises slowly (its onset delay is scored as a share of the run)
    steps: int | None = None  # the run's length in steps, for delays as a share of the run
    note: str = ""  # what the run is, printed next to its mistakes
    # kinds whose label the rule cannot decide at its own resolution: either verdict is accepted
    # and neither is scored (zoo_labels, rule 5's "Undetermined")
    undetermined: frozenset[str] = frozenset()
    noise: float | None = None  # a zoo run's per-step log-noise (`zoo_labels.log_noise`)

    @property
    def healthy(self) -> bool:
        """No kind is labelled, beyond the undetermined ones."""
        return not (set(self.expected) - self.undetermined)

    def scored(self, kinds: set[str]) -> set[str]:
        """`kinds` without the undetermined ones."""
        return set(kinds) - self.undetermined


class SeededShape(Protocol):
    """What a simulated split needs to be drawn: its seed and how many runs of each scenario."""

    seed: int
    counts: Mapping[str, int]


# (scenario, its generator) -> (the function writing the run into a folder, its labels)
Simulate = Callable[[str, np.random.Generator], tuple[Callable[[Path], None], dict[str, list[int]]]]


def seeded_cases(shape: SeededShape, prefix: str, simulate: Simulate, family: str = "synthetic") -> list[Case]:
    """Every case of a simulated split, named `<prefix>_<scenario>_<k>`.

    Each case gets its own generator, seeded by (the split's seed, the case's running index over
    all scenarios in `shape.counts` order): a case's run depends on its position only, so adding
    a scenario at the end of `counts` leaves every earlier case as it was.
    """
    out = []
    index = 0
    for scenario, count in shape.counts.items():
        for k in range(count):
            rng = np.random.default_rng([shape.seed, index])
            index += 1
            write, expected = simulate(scenario, rng)
            out.append(Case(name=f"{prefix}_{scenario}_{k:02d}", write=write, expected=expected, family=family))
    return out
