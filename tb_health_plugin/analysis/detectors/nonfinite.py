"""NaN and Inf in a monitored series.

No statistics needed: a non-finite loss or gradient norm poisons every later update unless the
optimiser skipped that step. Steps where the loss-scale manager reported an overflow are
excused for the gradient norm (dynamic loss scaling skips them by design). The finding is
critical when the series stays non-finite to its end or the series is the loss; an isolated
non-finite gradient norm that the run recovered from is a warning.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.findings import Finding


def nonfinite_values(
    steps: np.ndarray,
    values: np.ndarray,
    tag: str,
    what: str,
    excused_steps: np.ndarray | None = None,
    always_critical: bool = False,
) -> list[Finding]:
    """One finding for the non-finite points of one series (none when all are finite)."""
    bad = ~np.isfinite(values)
    if excused_steps is not None and excused_steps.size:
        bad &= ~np.isin(steps, excused_steps)
    if not bad.any():
        return []
    bad_steps = steps[bad]
    first = int(bad_steps[0])
    persists = bool(bad[-1])
    first_bad = int(np.argmax(bad))
    if first_bad > 0:
        advice = (
            f"Restart from a checkpoint at or before step {int(steps[first_bad - 1])} with a lower "
            "learning rate or loss scale, and check the batches around it."
        )
    else:
        advice = "It was never finite: check the inputs, the labels and the initialisation."
    kinds = sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in values[bad][:1000]})
    severity = "critical" if (persists or always_critical) else "warning"
    tail = "and stays non-finite to the end" if persists else f"at {int(bad.sum())} logged point(s)"
    return [
        Finding(
            kind="nonfinite",
            severity=severity,
            step=first,
            end_step=int(bad_steps[-1]),
            tag=tag,
            message=f"The {what} becomes {'/'.join(kinds)} at step {first} {tail}. {advice}",
            evidence={
                "nonfinite_points": int(bad.sum()),
                "points": int(values.size),
                "first_step": first,
                "persists_to_end": persists,
                "values": kinds,
            },
        )
    ]


def nonfinite_counts(steps: np.ndarray, counts: np.ndarray, tag: str) -> list[Finding]:
    """Windows in which the training hooks counted non-finite losses or gradients."""
    bad = np.isfinite(counts) & (counts > 0) | ~np.isfinite(counts)
    if not bad.any():
        return []
    first = int(steps[bad][0])
    persists = bool(bad[-1])
    return [
        Finding(
            kind="nonfinite",
            severity="critical" if persists else "warning",
            step=first,
            end_step=int(steps[bad][-1]),
            tag=tag,
            message=(
                f"The training hooks counted non-finite values in {int(bad.sum())} logging window(s), "
                f"the first ending at step {first}; inspect the batches and the learning rate there."
            ),
            evidence={
                "windows": int(bad.sum()),
                "total_count": float(np.nansum(np.where(np.isfinite(counts), counts, 0))),
                "persists_to_end": persists,
            },
        )
    ]
