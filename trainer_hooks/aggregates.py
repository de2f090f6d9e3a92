"""Window aggregates of every step's loss and gradient norm.

Scalars are written every `collect_freq` steps, but a spike must never be lost to sampling:
each step's value feeds these running aggregates, written (then reset) with each collection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class StepWindow:
    """Max, min and non-finite count of one series since the last reset.

    NaN and Inf are counted as non-finite; an Inf also reaches the max (or min) so that a blow-up
    shows there. Empty statistics are NaN.
    """

    count: int = 0
    nonfinite_count: int = 0
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

    def merge(self, count: int, maximum: float, minimum: float, nonfinite_count: int) -> None:
        """Fold in the aggregates of `count` steps computed elsewhere (NaN max/min: none)."""
        self.count += int(count)
        self.nonfinite_count += int(nonfinite_count)
        if not math.isnan(maximum):
            self.maximum = maximum if math.isnan(self.maximum) else max(self.maximum, maximum)
        if not math.isnan(minimum):
            self.minimum = minimum if math.isnan(self.minimum) else min(self.minimum, minimum)

    def reset(self) -> None:
        self.__init__()
