"""Overfitting: the evaluation loss rises while the training loss keeps falling.

Method (on the log of both losses; evaluations are few, so every rule is in eval points):

1. Noise of the evaluation loss: sigma_e = 1.4826 * MAD of its second differences / sqrt(6)
   over the last two thirds of the evaluations (second differences remove a local linear
   trend, a rise included; the steep first third would add its curvature; the MAD ignores the
   kink where the rise begins). Floor: 0.2% of the loss, below the print precision of logs.
2. Best evaluation: the minimum of a 3-point running median of the eval log-loss (one lucky
   evaluation does not make a minimum), reported at the lowest raw evaluation next to it.
3. Overfitting when, after the best evaluation, the last `MIN_RISING_EVALS` evaluations all sit
   more than `Z_RISE` = 3 sigma_e above it (each a 0.13% tail event under Gaussian eval noise;
   jointly far below the 1e-3 false-alarm budget of a run) and the training loss, smoothed,
   has fallen over the same steps by more than its own noise. If the training loss rose
   too, the problem is divergence, not overfitting.

Advice: the best checkpoint is at the best evaluation's step.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.robust import (
    MAD_TO_SIGMA,
    log_loss,
    mad,
    robust_sigma,
    rolling_median,
)
from tb_health_plugin.analysis.event import Event

MIN_EVALS = 5
MIN_RISING_EVALS = 2
Z_RISE = 3.0
MIN_EVAL_SIGMA_LOG = 0.002


def overfitting(
    eval_steps: np.ndarray,
    eval_values: np.ndarray,
    train_steps: np.ndarray,
    train_values: np.ndarray,
    tag: str,
) -> list[Event]:
    """At most one overfitting finding from an eval-loss series and the training loss."""
    ok = np.isfinite(eval_values)
    eval_steps, eval_values = np.asarray(eval_steps)[ok], np.asarray(eval_values, dtype=np.float64)[ok]
    tok = np.isfinite(train_values)
    train_steps, train_values = np.asarray(train_steps)[tok], np.asarray(train_values, dtype=np.float64)[tok]
    if eval_steps.size < MIN_EVALS or train_steps.size < MIN_EVALS:
        return []
    e = log_loss(eval_values)
    settled = e[e.size // 3 :]
    sigma_e = max(MAD_TO_SIGMA * mad(np.diff(settled, n=2)) / np.sqrt(6), MIN_EVAL_SIGMA_LOG)
    smooth_e = rolling_median(e, 3, edges="trend")
    best = int(np.argmin(smooth_e[:-MIN_RISING_EVALS]))
    best = max(best - 1, 0) + int(np.argmin(e[max(best - 1, 0) : best + 2]))  # the raw best nearby
    best_level = smooth_e[best]
    rising = e[-MIN_RISING_EVALS:] - best_level
    if not np.all(rising > Z_RISE * sigma_e):
        return []
    t = log_loss(train_values)
    train_smooth = rolling_median(t, 9, edges="trend")
    train_sigma = robust_sigma(t - rolling_median(t, 17, edges="trend"))
    at_best = train_smooth[min(np.searchsorted(train_steps, eval_steps[best]), train_steps.size - 1)]
    at_end = train_smooth[-1]
    if not at_best - at_end > train_sigma:
        return []
    first_above = best + int(np.argmax(e[best:] - best_level > Z_RISE * sigma_e))
    return [
        Event(
            kind="overfitting",
            severity="warning",
            step=int(eval_steps[best]),
            end_step=int(eval_steps[-1]),
            tag=tag,
            message="overfitting.eval_rises",
            args={"rise_factor": float(np.exp(e[-1] - best_level))},
            evidence={
                "best_eval_step": int(eval_steps[best]),
                "best_eval_loss": float(eval_values[best]),
                "last_eval_loss": float(eval_values[-1]),
                "first_rise_step": int(eval_steps[first_above]),
                "rise_z": float((e[-1] - best_level) / sigma_e),
                "eval_noise_sigma_log": float(sigma_e),
                "train_drop_log": float(at_best - at_end),
                "evals": int(eval_steps.size),
            },
        )
    ]
