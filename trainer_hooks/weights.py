"""Weight norms, update ratios and weight histograms, read from the host copies of the weights."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tb_health_plugin import contract
from trainer_hooks.values import square_sum, to_numpy


class WeightTracker:
    """Every `weight_freq` steps: each parameter's norm and its update ratio (the norm of the
    step's change over the norm before it), which needs the weights of the step just before."""

    def __init__(self, parameters: dict[str, Any], weight_freq: int) -> None:
        self.parameters = parameters
        self.weight_freq = weight_freq
        self._snapshot: tuple[int, dict[str, np.ndarray]] | None = None

    def wants(self, step: int, histogram_step: bool) -> bool:
        """Whether the weights are read at this step: a weight step, the step just before one
        (for the update ratio) or a histogram step."""
        if not self.parameters:
            return False
        freq = self.weight_freq
        near_weight_step = freq and (step % freq == 0 or (step + 1) % freq == 0)
        return bool(near_weight_step) or histogram_step

    def measure(self, step: int, histogram_step: bool) -> tuple[list[tuple[str, float]], list[tuple[str, np.ndarray]]]:
        """This step's (tag, value) scalars and (tag, weights) histograms."""
        # copies: the snapshot must not follow a parameter updated in place (numpy parameters)
        weights = {name: np.array(to_numpy(p)) for name, p in self.parameters.items()}
        scalars: list[tuple[str, float]] = []
        if self.weight_freq and step % self.weight_freq == 0:
            previous, self._snapshot = self._snapshot, None
            for name, value in weights.items():
                scalars.append((contract.PARAM_WEIGHT_NORM_PREFIX + name, math.sqrt(square_sum(value))))
                if previous is not None and previous[0] == step - 1 and name in previous[1]:
                    scalars.append((contract.PARAM_UPDATE_RATIO_PREFIX + name, update_ratio(previous[1][name], value)))
        histograms = [(contract.WEIGHT_HISTOGRAM_PREFIX + name, value) for name, value in weights.items()] if histogram_step else []
        if self.weight_freq and (step + 1) % self.weight_freq == 0:
            self._snapshot = (step, weights)  # the weights before the next weight step
        return scalars, histograms


def update_ratio(before: np.ndarray, after: np.ndarray) -> float:
    """|after - before| / |before|; 0 for no change, inf for a change from all-zero weights."""
    before_norm = math.sqrt(square_sum(before))
    update = math.sqrt(square_sum(np.subtract(after, before, dtype=np.float64)))
    return update / before_norm if before_norm > 0 else (0.0 if update == 0 else math.inf)
