"""The analysis' faster paths give the same numbers as the calls they replaced, bit for bit.

`tb-health check` on a healthy run must not import scipy.stats (about a second, more than the
analysis of the run): the Student-t quantiles of the noise tail come from the special functions
scipy.stats wraps, and the Theil-Sen lines of the stall and divergence detectors from numpy. The binned line fits take their bin medians from one partition rather than
`np.median`'s per-call machinery; the learning-rate shape fit computes its candidate curves a
few at a time. Each is compared with the former code, kept here as the oracle. And `tb-health
check` imports no other command's modules.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from tb_health_plugin.analysis.detectors.lr_fit import _fitted_inverse_sqrt
from tb_health_plugin.analysis.detectors.robust import (
    RESIDUAL_MAD_SHRINK,
    T_DEGREES,
    LinearFit,
    NoiseTail,
    binned_line,
    row_medians,
    t_quantile,
    theil_sen,
)
from tb_health_plugin.cli import COMMAND_MODULES, build_parser, named_command
from tests.eventlogs import write_scalars

ROOT = Path(__file__).resolve().parents[1]


def former_threshold(tail: NoiseTail, p: float) -> float:
    dist = stats.norm if np.isinf(tail.nu) else stats.t(tail.nu)
    return float(dist.isf(p) / (dist.ppf(0.75) * tail.mad_shrink))


def former_binned_line(x: np.ndarray, y: np.ndarray, bins: int = 16) -> LinearFit | None:
    n = x.size
    if n < 6:
        return None
    bins = int(min(bins, n // 2))
    width = n // bins
    bx = np.median(x[: bins * width].reshape(bins, width), axis=1)
    by = np.median(y[: bins * width].reshape(bins, width), axis=1)
    dx = bx - bx.mean()
    sxx = float(np.dot(dx, dx))
    if sxx <= 0:
        return None
    slope = float(np.dot(dx, by - by.mean()) / sxx)
    residual = by - by.mean() - slope * dx
    stderr = float(np.sqrt(np.dot(residual, residual) / max(bins - 2, 1) / sxx)) if bins > 2 else 0.0
    return LinearFit(slope, stderr, float(x[-1] - x[0]))


def former_fitted_inverse_sqrt(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    best, best_err = np.ones_like(x), np.inf
    for scale in np.geomspace(1e-3, 1e2, 40):
        curve = 1 / np.sqrt(1 + x / scale)
        curve = (curve - curve[-1]) / (1 - curve[-1])
        err = float(np.mean((y - curve) ** 2))
        if err < best_err:
            best, best_err = curve, err
    return best


def bits(*numbers) -> bytes:
    return np.asarray(numbers, dtype=np.float64).tobytes()


@pytest.mark.parametrize("nu", T_DEGREES)
def test_t_quantiles_are_those_of_scipy_stats(nu: float) -> None:
    dist = stats.norm if np.isinf(nu) else stats.t(nu)
    qs = np.concatenate([np.logspace(-300, -1e-4, 400), np.linspace(1e-3, 1 - 1e-3, 401)])
    assert bits(*(t_quantile(nu, q) for q in qs)) == bits(*dist.ppf(qs))
    assert bits(*(t_quantile(nu, q, upper=True) for q in qs)) == bits(*dist.isf(qs))


@pytest.mark.parametrize("index", range(len(T_DEGREES)))
def test_noise_tail_thresholds_unchanged(index: int) -> None:
    tail = NoiseTail(T_DEGREES[index], RESIDUAL_MAD_SHRINK[index])
    ps = [1e-12, 1e-6, 0.001, 0.01, 0.05 ** (1 / 3), 0.3, 0.5, 0.9]
    assert bits(*(tail.threshold(p) for p in ps)) == bits(*(former_threshold(tail, p) for p in ps))


special_floats = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, width=64),
    st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -1.5]),
)


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9), elements=special_floats))
def test_row_medians_are_numpy_medians(a: np.ndarray) -> None:
    assert np.asarray(row_medians(a)).tobytes() == np.asarray(np.median(a, axis=-1)).tobytes()


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 400),
    bins=st.integers(2, 24),
    slope=st.floats(-3, 3),
    noise=st.floats(0, 2),
    rounding=st.sampled_from([None, 0, 1]),
    seed=st.integers(0, 2**32 - 1),
)
def test_binned_line_unchanged(n: int, bins: int, slope: float, noise: float, rounding, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.log2(np.arange(n) + rng.uniform(1, 10))
    y = slope * x + noise * rng.standard_normal(n)
    if rounding is not None:
        y = np.round(y, rounding)  # ties inside bins, whole bins of one value
    before, after = former_binned_line(x, y, bins), binned_line(x, y, bins)
    assert (before is None) == (after is None)
    if before is not None:
        assert bits(after.slope, after.stderr, after.span) == bits(before.slope, before.stderr, before.span)


@pytest.mark.parametrize("fall", [8.0, 0.4], ids=["halves", "falls_a_fifth"])
def test_checking_a_learning_run_imports_no_scipy_stats(tmp_path: Path, fall: float) -> None:
    """A learning run's loss goes through every loss detector; none may pull in scipy.stats. A
    run whose loss did not halve over its high-rate stretch also gets the stall test's Theil-Sen
    line (numpy's, see `theil_sen`)."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 1501) * 10
    loss = np.exp(np.log(1.5 + fall * (1 + steps / 2000.0) ** -0.6) + 0.03 * rng.standard_normal(steps.size))
    lr = 3e-4 * np.minimum(1.0, steps / 5000.0)
    write_scalars(tmp_path / "run", {
        "train/loss": (steps, loss),
        "train/lr": (steps, lr),
        "train/grad_norm": (steps, np.exp(0.3 * rng.standard_normal(steps.size))),
    })
    script = ("import io, json, sys, contextlib\n"
              "from tb_health_plugin import cli\n"
              "out = io.StringIO()\n"
              "with contextlib.redirect_stdout(out):\n"
              f"    code = cli.main(['check', {str(tmp_path)!r}, '--format', 'json'])\n"
              "report = json.loads(out.getvalue())\n"
              "print(code, report['runs'][0]['status'], 'scipy.stats' in sys.modules, 'scipy.ndimage' in sys.modules,\n"
              "      'tb_health_plugin.notify' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    # analysed (scipy.ndimage: the running medians), healthy, and neither scipy.stats nor the
    # notification sinks (`watch`'s mail and HTTP modules) imported on the way
    assert result.stdout.split() == ["0", "healthy", "False", "True", "False"], result.stdout + result.stderr


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 120),
    tied_x=st.booleans(),
    rounded_y=st.booleans(),
    alpha=st.sampled_from([0.95, 0.6827, 0.5, 0.3, 0.99]),
    seed=st.integers(0, 2**32 - 1),
)
def test_theil_sen_is_scipys(n: int, tied_x: bool, rounded_y: bool, alpha: float, seed: int) -> None:
    """Slope, intercept and Sen's interval, ties in x and y included, as scipy.stats computes them."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.integers(0, n // 2 + 1, n).astype(np.float64) if tied_x else rng.normal(size=n))
    y = 0.3 * x + rng.standard_t(3, n)
    if rounded_y:
        y = np.abs(np.round(y, 1))  # ties, and no -0.0 (sort and partition may order -0.0 and 0.0 apart)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.array(tuple(stats.theilslopes(y, x, alpha=alpha)), dtype=np.float64)
    got = np.array(tuple(theil_sen(y, x, alpha=alpha)), dtype=np.float64)
    assert np.array_equal(got, expected, equal_nan=True), (got, expected)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("command", COMMAND_MODULES)
def test_a_command_alone_parses_and_helps_as_among_all(command: str, lang: str) -> None:
    """`tb-health COMMAND ...` registers that command only; its help is the same."""
    def help_text(parser) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        return out.getvalue()

    assert named_command([command, "x"]) == command and named_command(["--help", command]) is None
    assert help_text(build_parser(lang, only=command)) == help_text(build_parser(lang))


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 2000),
    scale=st.floats(1e-4, 1e3),
    noise=st.floats(0, 0.2),
    nan_at=st.one_of(st.none(), st.integers(0, 1999)),
    seed=st.integers(0, 2**32 - 1),
)
def test_inverse_sqrt_fit_unchanged(n: int, scale: float, noise: float, nan_at, seed: int) -> None:
    """The learning-rate shape fit's 40 candidate curves, now computed 8 at a time."""
    x = np.linspace(0.0, 1.0, n)
    y = 1 / np.sqrt(1 + x / scale) + noise * np.random.default_rng(seed).standard_normal(n)
    if nan_at is not None:
        y[nan_at % n] = np.nan  # every error NaN: the flat curve stays
    assert _fitted_inverse_sqrt(x, y).tobytes() == former_fitted_inverse_sqrt(x, y).tobytes()
