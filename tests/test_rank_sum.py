"""`rank_sum.mann_whitney_p` gives scipy.stats.mannwhitneyu's p-values (its default method and
continuity correction), and the detectors that use it run without importing scipy.stats."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

from tb_health_plugin.analysis.detectors.rank_sum import mann_whitney_p
from tests.eventlogs import write_scalars

ROOT = Path(__file__).resolve().parents[1]


@settings(max_examples=400, deadline=None)
@given(
    n1=st.sampled_from([1, 2, 3, 5, 8, 9, 12, 40, 300]),
    n2=st.sampled_from([1, 2, 4, 8, 9, 15, 60, 500]),
    shift=st.sampled_from([0.0, 0.5, 2.0]),
    rounding=st.sampled_from([None, 0, 1]),
    infinities=st.booleans(),
    alternative=st.sampled_from(["greater", "less"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_p_values_are_scipys(n1, n2, shift, rounding, infinities, alternative, seed) -> None:
    """Exact (a sample of at most 8, no ties) and normal (ties, larger samples) alike."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n1) + shift, rng.standard_normal(n2)
    if rounding is not None:  # ties
        x, y = np.round(x, rounding), np.round(y, rounding)
    if infinities:
        x[0], y[-1] = np.inf, -np.inf
    expected = mannwhitneyu(x, y, alternative=alternative).pvalue
    assert mann_whitney_p(x, y, alternative) == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_edge_cases() -> None:
    assert np.isnan(mann_whitney_p(np.array([]), np.array([1.0]), "greater"))
    assert np.isnan(mann_whitney_p(np.array([np.nan, 1.0]), np.array([1.0, 2.0]), "less"))
    # every value of x above every value of y: the exact tail is one ordering in C(n1 + n2, n1)
    assert mann_whitney_p(np.arange(5.0) + 10, np.arange(7.0), "greater") == pytest.approx(1 / 792)
    assert mann_whitney_p(np.arange(5.0) + 10, np.arange(7.0), "less") == 1.0
    with pytest.raises(ValueError, match="alternative"):
        mann_whitney_p(np.ones(3), np.ones(3), "two-sided")


def test_a_slowdown_is_found_without_importing_scipy_stats(tmp_path: Path) -> None:
    """The throughput detector's change point goes through the rank test: a run whose step time
    doubles two thirds of the way is reported, and scipy.stats is never imported."""
    rng = np.random.default_rng(5)
    steps = np.arange(1, 1201) * 10
    step_ms = np.where(steps > 8000, 200.0, 100.0) * np.exp(0.05 * rng.standard_normal(steps.size))
    write_scalars(tmp_path / "run", {
        "train/loss": (steps, 2.0 + 3.0 * (1 + steps / 500.0) ** -0.5 + 0.02 * rng.standard_normal(steps.size)),
        "train/step_time_ms": (steps, step_ms),
    })
    script = ("import io, json, sys, contextlib\n"
              "from tb_health_plugin import cli\n"
              "out = io.StringIO()\n"
              "with contextlib.redirect_stdout(out):\n"
              f"    cli.main(['check', {str(tmp_path)!r}, '--format', 'json'])\n"
              "report = json.loads(out.getvalue())\n"
              "print(sorted({f['kind'] for f in report['runs'][0]['findings']}), 'scipy.stats' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    kinds, imported = result.stdout.rsplit(" ", 1)
    assert "throughput" in kinds and imported.strip() == "False", result.stdout + result.stderr
