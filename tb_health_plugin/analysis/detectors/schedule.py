"""What the logged learning-rate schedule tells the loss detectors.

Two facts matter: where warm-up ends (early bumps and large early losses are normal before it)
and where the learning rate is still "high" (a plateau there is a stall; the flattening of a
planned anneal is not). Without a logged learning rate we fall back on the share of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Without a logged schedule, the first 10% of the steps count as warm-up: common warm-up
# lengths are 1-10% of training (e.g. 2000 of 300k steps for GPT-3, 1-3% in Llama recipes).
DEFAULT_WARMUP_SHARE = 0.10
# The learning rate counts as "still high" at or above half its peak: cosine and linear decays
# spend the first half of the decay above that level; step schedules drop below it at once.
HIGH_LR_SHARE = 0.5
WARMUP_REACHED_SHARE = 0.95  # warm-up ends when the rate first reaches 95% of its peak


def default_warmup_end(loss_steps: np.ndarray) -> int:
    """The first logged step past `DEFAULT_WARMUP_SHARE` of the steps the log covers.

    A share of the steps, not of the logged points: logged every step or every 20th, the same
    run keeps the same stretch (a tenth of 17 points rounded up skipped 40 of 343 steps, 12%,
    against 35 when every step was logged). The log covers the steps from one logging interval
    before its first point (a point at step 20 of a log every 20 steps sums up steps 1-20) to its
    last, so a job resumed at step 100000 gets the same stretch as one numbered from 0.
    """
    if loss_steps.size == 0:
        return 0
    if loss_steps.size == 1:
        return int(loss_steps[0])
    interval = float(np.median(np.diff(loss_steps)))
    covered_from = float(loss_steps[0]) - max(interval, 1.0)
    reached = covered_from + DEFAULT_WARMUP_SHARE * (float(loss_steps[-1]) - covered_from)
    index = min(int(np.searchsorted(loss_steps, reached, side="left")), loss_steps.size - 1)
    return int(loss_steps[index])


@dataclass(frozen=True)
class Schedule:
    """The learning rate interpolated onto the loss's steps (None when not logged)."""

    warmup_end_step: int
    lr_at_steps: np.ndarray | None
    lr_peak: float | None
    # where the logged rate itself first reaches 95% of its peak, when it rises at the start; a
    # point after it and before `warmup_end_step` is early in the run, not in warm-up (the wording)
    lr_warmup_end_step: int | None = None

    def high_lr_mask(self) -> np.ndarray | None:
        if self.lr_at_steps is None or not self.lr_peak:
            return None
        return self.lr_at_steps >= HIGH_LR_SHARE * self.lr_peak


def infer_schedule(
    loss_steps: np.ndarray, lr_steps: np.ndarray | None = None, lr_values: np.ndarray | None = None
) -> Schedule:
    """Warm-up end and the learning rate at each loss step.

    Warm-up ends at the first logged step where the rate reaches 95% of its peak, when the rate
    rises at the start, and never before `default_warmup_end`: the fastest, bumpiest part of a
    loss curve is its beginning, schedule or not.
    """
    loss_steps = np.asarray(loss_steps)
    fallback = default_warmup_end(loss_steps)
    if lr_steps is None or lr_values is None:
        return Schedule(fallback, None, None)
    ok = np.isfinite(lr_values)
    lr_steps, lr_values = np.asarray(lr_steps)[ok], np.asarray(lr_values, dtype=np.float64)[ok]
    if lr_values.size < 2 or lr_values.max() <= 0:
        return Schedule(fallback, None, None)
    peak = float(lr_values.max())
    at_loss = np.interp(loss_steps, lr_steps, lr_values)
    rises = lr_values[0] < WARMUP_REACHED_SHARE * peak
    rate_warmup_end = int(lr_steps[np.argmax(lr_values >= WARMUP_REACHED_SHARE * peak)]) if rises else None
    warmup_end = fallback if rate_warmup_end is None else max(rate_warmup_end, fallback)
    return Schedule(warmup_end, at_loss, peak, rate_warmup_end)
