"""Window aggregates of every step's loss and gradient norm.

Scalars are written every `collect_freq` steps, but a spike must never be lost to sampling:
each step's value feeds these running aggregates, written (then reset) with each collection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tb_health_plugin import contract


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


class HealthWindow:
    """The aggregates written with each collection: every step's loss (max, min), gradient norm
    (max), non-finite values and loss-scale overflows since the previous collection."""

    def __init__(self) -> None:
        self.loss = StepWindow()
        self.grad_norm = StepWindow()
        self.overflow_steps = 0
        self.has_overflow_flag = False  # the training passes `overflow`: its count is logged

    def add_step(self, loss: float, grad_norm: float | None, overflowed: bool) -> None:
        self.loss.add(loss)
        if grad_norm is not None:
            self.grad_norm.add(grad_norm)
        if overflowed:
            self.overflow_steps += 1

    def merge(self, window: Mapping[str, float]) -> None:
        """Fold in aggregates computed on the device over several steps (sink mode)."""
        steps = int(window["steps"])
        # the grad-norm non-finite count is folded into the loss window's: they are logged summed
        self.loss.merge(steps, float(window["loss_max"]), float(window["loss_min"]), int(window["nonfinite_count"]))
        self.grad_norm.merge(steps, float(window["grad_norm_max"]), math.nan, 0)
        self.overflow_steps += int(window.get("overflow_count", 0))

    def take(self) -> list[tuple[str, float]]:
        """The window's (tag, value) scalars; the window starts again empty."""
        scalars = [(contract.LOSS_MAX, self.loss.maximum), (contract.LOSS_MIN, self.loss.minimum)]
        nonfinite = self.loss.nonfinite_count
        if self.grad_norm.count:
            scalars.append((contract.GRAD_NORM_MAX, self.grad_norm.maximum))
            nonfinite += self.grad_norm.nonfinite_count
        scalars.append((contract.NONFINITE_COUNT, nonfinite))
        if self.has_overflow_flag:
            scalars.append((contract.OVERFLOW_COUNT, self.overflow_steps))
        self.overflow_steps = 0
        self.loss.reset()
        self.grad_norm.reset()
        return scalars
