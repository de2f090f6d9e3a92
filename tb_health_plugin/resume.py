"""The one rule for resumed runs: which point of a tag wins when its steps repeat.

A run resumed from an earlier checkpoint logs steps it had already logged. TensorBoard treats
the later write as the truth: told of a restart at step s (a `SessionLog.START` event, or in old
files any step going back), its `EventAccumulator` purges every point held at or after s
(`purge_orphaned_data`). Our hooks and MindFormers write no such marker, so a step going back is
taken as the restart; the tab, the CLI and the hooks' online analysis then see one series
whatever reads it:

    a point survives iff no later-written point of the same tag has a step at or below its own.

So a step written twice keeps its second value (MindSpore writes the epoch-end step twice), and
after a resume at step s the old run's points from s on are gone, including those past the
resumed run's last step (they belong to the abandoned timeline). The readers
(`readers/accumulate.py`, in batches as files are read) and the hooks (`trainer_hooks/online.py`,
on a snapshot) both call `surviving_points`; the surviving steps are strictly increasing.
"""

from __future__ import annotations

import numpy as np


def surviving_points(steps: np.ndarray) -> np.ndarray:
    """Mask of the points, given in write order, that no later point overrides."""
    steps = np.asarray(steps)
    if steps.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    later_min = np.minimum.accumulate(steps[::-1])[::-1]
    keep = np.ones(steps.shape[0], dtype=bool)
    keep[:-1] = steps[:-1] < later_min[1:]
    return keep
