"""The synthetic family's steady rises are scored as slow creeps (the benchmark measured none)."""

from __future__ import annotations

from bench.detection import cases_loss


def test_the_synthetic_steady_rises_are_slow_creeps_with_their_length():
    for split in ("dev", "holdout"):
        drawn = cases_loss.cases(split)
        creeps = [c for c in drawn if c.creep]
        assert creeps and all("_ramp_" in c.name and "divergence" in c.expected for c in creeps)
        assert all(c.steps and 0 < c.expected["divergence"][0] < c.steps for c in creeps)
        assert not any(c.creep for c in drawn if "_ramp_" not in c.name)
