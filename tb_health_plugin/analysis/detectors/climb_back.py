"""Climbed back: a run that ends having undone most of what it learned.

The divergence detector's excursion test (`divergence.py`, step 4) needs a rise of six noise
sigmas of the *per-point* noise above the running best, so on a noisy small-batch run (sigma
0.1-0.3 in log units) a loss that wanders back up from 1.5 to the untrained model's 2.1 over
the second half of the run passes unseen, and its end stays under twice the start (step 6).
Yet a user would restart such a run from its best checkpoint. This test compares levels held
over a tenth of the run, whose noise is far smaller than a point's.

Method, on the finite points of a positive loss (a loss that can be zero or negative has no
"share of the start"):

1. Levels. `start`: the median of the first `EDGE_POINTS` points. `best`: the least value of
   the running median over `m = max(5, n / 10)` points (odd), before the end stretch: the
   best level the run *held* for a tenth of its length, not one lucky stretch. `end`: the
   median of the last `max(EDGE_POINTS, n / 10)` points.
2. Material: the run learned (best < start), and the end lost more than `LOST_SHARE` (half) of
   what it learned, end - best > 0.5 (start - best): it ends nearer its untrained loss than its
   best; and by at least `MIN_SHARE_OF_START` (a quarter) of the start loss, end - best > 0.25
   start, so that a run that learned little (2.08 to 1.98 and back to 2.05: a stall's business)
   does not count.
   These are the zoo's label (`bench/detection/zoo_labels.py`, rule 2), stated on logged points.
3. Significant, in log units: a median of m points of Gaussian noise sigma has standard
   deviation s = 1.2533 sigma / sqrt(m); the least of the k = n / m roughly independent window
   medians of a flat series lies at most about s sqrt(2 ln k) below its level (the expected
   maximum of k Gaussians), and the difference of two levels has standard deviation s sqrt(2).
   The climb must exceed s (sqrt(2 ln k) + `Z_EXCESS` sqrt(2)), `Z_EXCESS` = 6 as in the
   divergence detector: noise alone does not reach it at any run length. sigma is the run's
   robust per-point noise around a 17-point running median (as in `divergence.py`). Noise that
   wanders (lag-1 autocorrelation rho of those residuals, estimated from MADs as the spike
   detector does) averages out more slowly: s is multiplied by sqrt((1 + rho) / (1 - rho)),
   the variance ratio of a mean of AR(1) points. Wander slower than the 17-point median is in
   neither sigma nor rho: against that, the floors of step 2 guard (a quarter of the start
   loss). On 200 plateaus with AR(1) noise of rho 0.8 and sd 0.2 in log units the test fires on
   2, without the rho factor on 12; at rho 0.9 on 20 of 200 either way (`test_climb_back.py`).

4. Long series: a running median over a tenth of millions of points is slow (30 s at 5M), so
   above `MAX_LEVEL_POINTS` the series is first reduced to the medians of consecutive groups of
   g points (at most 4000 of them; the log of each group's median of the loss, the same as the
   median of its logs for odd g) and steps 1-3 run on those. The noise is then estimated on the
   group medians themselves, so the bound of step 3 stays that of the points it is applied to
   (the start keeps the first raw points: a fast-falling loss is far lower a group later).

The finding is a warning (the run ended; nothing says it keeps rising) from the first point
after the best level; the advice is to restart from the checkpoint nearest that level.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.detectors.divergence import (
    EDGE_POINTS,
    LOST_SHARE,
    MIN_SHARE_OF_START,
    NOISE_TREND_WINDOW,
    SMOOTH_WINDOW,
    Z_EXCESS,
)
from tb_health_plugin.analysis.detectors.robust import (
    MEDIAN_SD,
    TINY_LOG_SCALE,
    odd_window,
    robust_lag1_autocorrelation,
    robust_sigma,
    rolling_median,
    row_medians,
)
from tb_health_plugin.analysis.event import Event, Phrase

MIN_POINTS = 20  # fewer, and a tenth of the run is 1 point: no held level, only points
LEVEL_SHARE = 0.10  # the best level is one held for a tenth of the run; the end is its last tenth
MAX_LEVEL_POINTS = 4000  # longer series are judged on the medians of groups of points (step 4)
GROUPS_AT_ONCE = 256  # group medians computed per partition: temporaries of 256 groups' points


def climbed_back(steps: np.ndarray, values: np.ndarray, tag: str, what: str = "loss") -> Event | None:
    """A warning when the loss ends having lost most of what it learned, else None."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.all():  # copies only when there is something to leave out (memory: robust.py)
        steps, values = steps[finite], values[finite]
    del finite
    if values.size < MIN_POINTS or np.any(values <= 0):
        return None
    start = float(np.median(np.log(values[:EDGE_POINTS])))
    steps, y = _grouped_log(steps, values)
    n = y.size
    window = odd_window(max(SMOOTH_WINDOW, int(LEVEL_SHARE * n)))
    end_points = max(EDGE_POINTS, int(LEVEL_SHARE * n))
    held = rolling_median(y, window, edges="mirror")[: n - end_points]
    best_at = int(np.argmin(held))
    best, end = float(held[best_at]), float(np.median(y[-end_points:]))
    start_loss, best_loss, end_loss = np.exp(start), np.exp(best), np.exp(end)
    learned, lost = start_loss - best_loss, end_loss - best_loss
    if not (learned > 0 and lost > LOST_SHARE * learned and lost > MIN_SHARE_OF_START * start_loss):
        return None
    residual = y - rolling_median(y, NOISE_TREND_WINDOW, edges="trend")
    sigma = max(robust_sigma(residual), TINY_LOG_SCALE)
    rho = robust_lag1_autocorrelation(residual)
    level_sd = MEDIAN_SD * sigma / np.sqrt(window) * np.sqrt((1 + rho) / (1 - rho))
    windows = max(n / window, 2.0)
    noise = level_sd * (np.sqrt(2 * np.log(windows)) + Z_EXCESS * np.sqrt(2))
    if end - best <= noise:
        return None
    onset = min(best_at + 1, n - 1)
    return Event(
        kind="divergence",
        severity="warning",
        step=int(steps[onset]),
        tag=tag,
        message="divergence.climbed_back",
        args={"what": Phrase(f"series.{what}"),  # "lost 339% of what it had learned" said nothing
              "lost": Phrase("divergence.climbed_back.lost_all" if lost >= learned
                             else "divergence.climbed_back.lost_share")},
        evidence={
            "start_loss": float(start_loss),
            "best_loss": float(best_loss),
            "best_step": int(steps[best_at]),
            "end_loss": float(end_loss),
            "lost_share_of_learned": float(lost / learned),
            "climb_log": float(end - best),
            "noise_log": float(noise),
            "noise_sigma_log": float(sigma),
            "noise_lag1_autocorrelation": float(rho),
            "level_window_points": int(window),
            "last_healthy_step": int(steps[best_at]),
        },
    )


def _grouped_log(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log of the values; above `MAX_LEVEL_POINTS` points (step 4 of the module doc), the
    log of the medians of consecutive groups of g points (the last n mod g left out), each at
    its group's middle step, taken a few hundred groups at a time so that no whole-series
    temporary is made."""
    if values.size <= MAX_LEVEL_POINTS:
        return steps, np.log(values)
    group = values.size // MAX_LEVEL_POINTS + 1
    groups = values.size // group
    medians = np.empty(groups)
    for first in range(0, groups, GROUPS_AT_ONCE):
        last = min(first + GROUPS_AT_ONCE, groups)
        medians[first:last] = row_medians(values[first * group : last * group].reshape(-1, group))
    return steps[group // 2 : groups * group : group], np.log(medians)
