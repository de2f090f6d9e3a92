"""NaN and Inf in a monitored series.

No statistics needed: a non-finite loss or gradient norm poisons every later update unless the
optimiser skipped that step. Steps where the loss-scale manager reported an overflow are
excused for the gradient norm (dynamic loss scaling skips them by design). The finding is
critical when the series stays non-finite to its end or the series is the loss; an isolated
non-finite gradient norm that the run recovered from is a warning.
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis.event import Event, Phrase


def nonfinite_values(
    steps: np.ndarray,
    values: np.ndarray,
    tag: str,
    what: str,
    excused_steps: np.ndarray | None = None,
    always_critical: bool = False,
) -> list[Event]:
    """One finding for the non-finite points of one series (none when all are finite).

    `what` names the series for the message: a code of the catalogue's `series.<what>`
    (`training_loss`, `gradient_norm`, `evaluation_loss`, `learning_rate`)."""
    bad = ~np.isfinite(values)
    if excused_steps is not None and excused_steps.size:
        bad &= ~np.isin(steps, excused_steps)
    if not bad.any():
        return []
    bad_steps = steps[bad]
    first = int(bad_steps[0])
    persists = bool(bad[-1])
    first_bad = int(np.argmax(bad))
    finite_at = np.flatnonzero(~bad)
    final_stretch = int(finite_at[-1]) + 1 if finite_at.size else 0  # where the non-finite end begins
    kinds = sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in values[bad][:1000]})
    severity = "critical" if (persists or always_critical) else "warning"
    args = {
        "what": Phrase(f"series.{what}"),
        "nonfinite": "/".join(kinds),
        "tail": Phrase(_tail(persists, final_stretch == first_bad)),
        "then": Phrase(_what_then(bad, first_bad)),
    }
    if first_bad > 0:
        args["restart_step"] = int(steps[first_bad - 1])
    return [
        Event(
            kind="nonfinite",
            severity=severity,
            step=first,
            end_step=int(bad_steps[-1]),
            tag=tag,
            message="nonfinite.values",
            args=args,
            evidence={
                "nonfinite_points": int(bad.sum()),
                "points": int(values.size),
                "first_step": first,
                "persists_to_end": persists,
                "nonfinite_to_end_from_step": int(steps[final_stretch]) if persists else None,
                "values": kinds,
            },
        )
    ]


def _tail(persists: bool, from_first: bool) -> str:
    """How the series ends: non-finite from its first bad point on, finite again in between and
    non-finite at its end (interval means of 20 steps hold an overflowed step every few points,
    the last among them: "stays non-finite to the end" from the first would be false), or
    finite at its end."""
    if persists:
        return "nonfinite.tail.persists" if from_first else "nonfinite.tail.points_and_end"
    return "nonfinite.tail.points"


def _what_then(bad: np.ndarray, first_bad: int) -> str:
    """The advice: restart before the first bad point; or, when the first logged point is
    already bad, say whether the series was never finite (inputs, labels, initialisation) or
    turned finite later (it blew up before the first logged point: the first updates, or the
    first batches)."""
    if first_bad > 0:
        return "nonfinite.restart"
    return "nonfinite.never_finite" if bad.all() else "nonfinite.from_first_point"


def damaged_windows(counts: np.ndarray, skipped: np.ndarray | float = 0.0) -> np.ndarray:
    """Which windows hold more non-finite losses and gradient norms than the loss scaler skipped
    as overflows (`skipped` per window; each overflow is one non-finite gradient norm whose
    update was thrown away, the rule `trainer_hooks.stopping.nonfinite_update` stops a run by).
    A NaN count is no clean window either."""
    return ~(np.asarray(counts, dtype=np.float64) <= skipped)


def skipped_per_window(steps: np.ndarray, overflow_steps: np.ndarray, overflow_counts: np.ndarray) -> np.ndarray:
    """The hooks' `train/overflow_count` at each of `steps` (0 where none is logged there)."""
    skipped = np.zeros(np.asarray(steps).size)
    _, at_window, at_overflow = np.intersect1d(steps, overflow_steps, assume_unique=True, return_indices=True)
    counts = np.asarray(overflow_counts, dtype=np.float64)[at_overflow]
    skipped[at_window] = np.where(np.isfinite(counts), counts, 0.0)
    return skipped


def nonfinite_counts(steps: np.ndarray, counts: np.ndarray, tag: str,
                     skipped: np.ndarray | float = 0.0) -> list[Event]:
    """Windows in which the training hooks counted non-finite losses or gradients beyond the
    overflows the loss scaler skipped there (`damaged_windows`)."""
    bad = damaged_windows(counts, skipped)
    if not bad.any():
        return []
    first = int(steps[bad][0])
    persists = bool(bad[-1])
    return [
        Event(
            kind="nonfinite",
            severity="critical" if persists else "warning",
            step=first,
            end_step=int(steps[bad][-1]),
            tag=tag,
            message="nonfinite.counts",
            evidence={
                "windows": int(bad.sum()),
                "total_count": float(np.nansum(np.where(np.isfinite(counts), counts, 0))),
                "persists_to_end": persists,
            },
        )
    ]
