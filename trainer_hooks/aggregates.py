"""Window aggregates of every step's loss and gradient norm.

Scalars are written every `collect_freq` steps, but a spike must never be lost to sampling:
each step's value feeds these running aggregates, written (then reset) with each collection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class StepWindow:
    """Max, min, mean and non-finite count of one series since the last reset.

    NaN and Inf are counted as non-finite; an Inf also reaches the max (or min) so that a blow-up
    shows there, while the mean is over the finite values only. Empty statistics are NaN.
    """

    count: int = 0
    nonfinite_count: int = 0
    finite_total: float = 0.0
    finite_count: int = 0
    maximum: float = math.nan
    minimum: float = math.nan

    def add(self, value: float) -> None:
        self.count += 1
        if math.isnan(value):
            self.nonfinite_count += 1
            return
        self.maximum = value if math.isnan(self.maximum) else max(self.maximum, value)
        self.minimum = value if math.isnan(self.minimum) else min(self.minimum, value)
        if math.isinf(value):
            self.nonfinite_count += 1
            return
        self.finite_count += 1
        self.finite_total += value

    @property
    def mean(self) -> float:
        return self.finite_total / self.finite_count if self.finite_count else math.nan

    def reset(self) -> None:
        self.__init__()
