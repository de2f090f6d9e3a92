"""Metamorphic checks: a zoo run's verdict must not change under transformations of its logs
that change nothing about the training.

The verdict of a run is the set of finding kinds tb-health reports at warning or critical
severity (the empty set: healthy). Every zoo run is rendered from its raw per-step values
(`cases_zoo`, cached) as a reference, the loss, learning rate and global gradient norm logged at
every step under `train/loss`, `train/lr`, `train/grad_norm`, and once per transformation:

- `every_N_points` / `every_N_means` (N = 5, 10, 50): logged every N steps, the last step's
  values or the mean loss over the window (the rate and norm of the last step);
- `offset_100000`: every step number + 100000 (a run resumed from a late checkpoint);
- `loss_x10`, `loss_x0.01`: the loss multiplied by a constant (another loss reduction or unit);
- `tag_loss`, `tag_Loss_train`: the loss under another spelling that `roles.py` recognises;
- `tensor_scalars`: the values as tensor-encoded scalars (the way TensorBoard's summary_v2 and
  TF2 write them) instead of the legacy `simple_value`;
- `resume_duplicate`: the run split into two event files, the second (written later) repeating
  the last `RESUME_REPEAT` steps of the first, as a job resumed from a checkpoint does;
- `healthy_tail` (runs labelled healthy only): `TAIL_SHARE` more steps of a run that simply
  went on: the loss continues its trend over the last `TAIL_SOURCE_SHARE` of the run (a power
  law, never upwards), the norm stays at its end level, both with residuals drawn from that
  stretch in blocks that keep their correlation (`moving_blocks`), the rate at its last value
  (`continued` says why not the raw values).

A run labelled with a loss spike is left out of the `every_N_*` checks: a one-step spike cannot
be seen in points that skip its step or in means that dilute it, so its verdict may rightly
change there. For the same reason (the transformation deletes the evidence) two more are left
out: from `every_N_points`, a run whose every NaN/Inf lies between the kept points (a skipped
overflow the run recovered from); and from both, a run whose labelled gradient rise starts
within N steps of its first non-finite value (the climb and the blow-up fall into one logging
window, so no logged norm grew before it turned non-finite), and a run whose first finite kept
point already stands above twice its untrained loss (step 1's, which the reference logs and the
renderings do not: a blow-up within the first window leaves no start to rise from, the case of
the zoo's rule 2 and of the divergence detector's rise far above the start), or whose first
finite kept gradient norm stands `EXPLODE_DECADES` above step 1's (the same for the norm: rule 3). So is a run that would keep fewer than `MIN_POINTS` logged points: the detectors
rightly decline to judge a handful of points (the stall test needs 10, the spike tests more), and the zoo's runs of
200-500 steps keep only 4-10 points at N = 50, so that row holds the zoo's long runs
(`cases_zoo.LONG_SIZES`: 1,500-4,000 steps, in every split). Target: each invariance holds on at least `TARGET_SHARE` of the runs.
Beside that share the table prints one that does not count a change confined to kinds the zoo's
rule leaves undetermined for the run (`zoo_labels.undetermined_kinds`: rule 5's stall whose
interval straddles the 5% line at every step): the benchmark accepts either verdict there, and
a sparser log holds less evidence than the full one, so a test that needs evidence may change
its answer. That share says how many breaks a detector could avoid at all; the target is the
first share's.
Everything is written with TensorBoard's own `EventFileWriter` and protos.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from bench.detection import cases_zoo, zoo_labels
from bench.detection.events import SECONDS_PER_STEP, WALL_START

TARGET_SHARE = 0.98
INTERVALS = (5, 10, 50)
OFFSET = 100_000
LOSS_FACTORS = (10.0, 0.01)
TAG_SPELLINGS = ("loss", "Loss/train")
RESUME_AT_SHARE = 0.6
RESUME_REPEAT = 20
TAIL_SHARE = 0.5
TAIL_SOURCE_SHARE = 0.2
SUBSAMPLING_PREFIX = "every_"
MIN_POINTS = 16


@dataclass
class Rendering:
    """What to write for one run: event files, each a list of (step, {tag: value})."""

    files: list[list[tuple[int, dict[str, float]]]]
    tensor_encoded: bool = False


def rows(steps: np.ndarray, series: dict[str, np.ndarray]) -> list[tuple[int, dict[str, float]]]:
    return [(int(step), {tag: float(values[i]) for tag, values in series.items()}) for i, step in enumerate(steps)]


def base_series(run: cases_zoo.ZooRun, loss_tag: str = "train/loss") -> tuple[np.ndarray, dict[str, np.ndarray]]:
    steps = np.arange(1, run.loss.size + 1)
    return steps, {loss_tag: run.loss, "train/lr": run.lr, "train/grad_norm": run.grad_norm}


def reference(run: cases_zoo.ZooRun) -> Rendering:
    return Rendering([rows(*base_series(run))])


def every(interval: int, means: bool) -> Callable[[cases_zoo.ZooRun], Rendering]:
    def render(run: cases_zoo.ZooRun) -> Rendering:
        points = run.loss.size // interval
        last = np.arange(1, points + 1) * interval - 1
        loss = cases_zoo.interval_means(run.loss, interval) if means else run.loss[last]
        series = {"train/loss": loss, "train/lr": run.lr[last], "train/grad_norm": run.grad_norm[last]}
        return Rendering([rows(last + 1, series)])

    return render


def offset(run: cases_zoo.ZooRun) -> Rendering:
    steps, series = base_series(run)
    return Rendering([rows(steps + OFFSET, series)])


def loss_times(factor: float) -> Callable[[cases_zoo.ZooRun], Rendering]:
    def render(run: cases_zoo.ZooRun) -> Rendering:
        steps, series = base_series(run)
        series["train/loss"] = series["train/loss"] * factor
        return Rendering([rows(steps, series)])

    return render


def spelled(tag: str) -> Callable[[cases_zoo.ZooRun], Rendering]:
    def render(run: cases_zoo.ZooRun) -> Rendering:
        return Rendering([rows(*base_series(run, loss_tag=tag))])

    return render


def tensor_scalars(run: cases_zoo.ZooRun) -> Rendering:
    return Rendering([rows(*base_series(run))], tensor_encoded=True)


def resume_duplicate(run: cases_zoo.ZooRun) -> Rendering:
    steps, series = base_series(run)
    cut = int(steps.size * RESUME_AT_SHARE)
    first = rows(steps[:cut], {t: v[:cut] for t, v in series.items()})
    again = cut - RESUME_REPEAT
    second = rows(steps[again:], {t: v[again:] for t, v in series.items()})
    return Rendering([first, second])


def healthy_tail(run: cases_zoo.ZooRun) -> Rendering:
    """The run goes on for `TAIL_SHARE` more steps the way it was going (see `continued`)."""
    steps, series = base_series(run)
    n = steps.size
    extra = int(n * TAIL_SHARE)
    source = np.arange(n - max(2, int(n * TAIL_SOURCE_SHARE)), n)
    drawn = moving_blocks(source.size, extra, np.random.default_rng(n))
    new_steps = np.arange(n + 1, n + extra + 1)
    tail = {
        "train/loss": continued(steps[source], series["train/loss"][source], new_steps, drawn, carry_slope=True),
        "train/grad_norm": continued(steps[source], series["train/grad_norm"][source], new_steps, drawn,
                                     carry_slope=False),
        "train/lr": np.full(extra, series["train/lr"][-1]),
    }
    extended = {tag: np.concatenate([values, tail[tag]]) for tag, values in series.items()}
    return Rendering([rows(np.arange(1, n + extra + 1), extended)])


def moving_blocks(size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` indices into a stretch of `size` points: consecutive blocks of it, each from a
    random start (a moving-block bootstrap, Kunsch 1989), of length about `size` ** (1/3), the
    order that suits a dependent series (Hall, Horowitz and Jing 1995).

    Residuals drawn one by one, as this check first did, are independent whatever the run's
    were: hooks' window maxima and interval means, and many per-step losses, are correlated
    from point to point (lag-1 0.2-0.4 in the zoo), and the spike detector rightly discounts
    a cluster of correlated points (Brown's correction). A tail of independent draws lowered the
    run's estimated correlation (0.34 -> 0.26 on zoo_seen10_002) and so turned an early point of
    the unchanged part of the run into a spike: the check broke on noise of another law than
    the run's. Blocks keep the correlation within them."""
    block = max(1, min(size, int(np.ceil(size ** (1 / 3)))))
    starts = rng.integers(0, size - block + 1, -(-count // block))
    return (starts[:, None] + np.arange(block)).ravel()[:count]


def continued(source_steps: np.ndarray, source: np.ndarray, new_steps: np.ndarray, drawn: np.ndarray,
              carry_slope: bool) -> np.ndarray:
    """A positive series continued past its end: its trend over `source` carried on, plus
    residuals around that trend drawn (`drawn`, indices into `source`) from the same stretch.

    The trend is a Theil-Sen line of the log value against the log step (healthy loss curves are
    close to power laws, the model the stall detector uses too). Drawing the raw values of the
    last stretch instead, as this check first did, puts a run that is still improving back to
    where it was a fifth of the run earlier: a jump up by its whole recent progress at the join
    (1.6x on a zoo run still halving its loss over its last fifth), which a detector rightly
    calls a spike or a rise, so the check broke on a fault it made itself. `carry_slope`: the
    loss goes on along its line, never upwards (a healthy run that goes on does not climb);
    otherwise (the gradient norm) the series stays at the line's end level.
    """
    logs = np.log(np.maximum(source, np.finfo(np.float64).tiny))
    x = np.log(source_steps.astype(np.float64))
    slope, intercept, _, _ = stats.theilslopes(logs, x)
    residuals = logs - (intercept + slope * x)
    if carry_slope and slope <= 0:
        future = intercept + slope * np.log(new_steps.astype(np.float64))
    elif carry_slope:
        future = np.full(new_steps.size, float(np.median(logs)))  # a rising stretch: held at its level
        residuals = logs - float(np.median(logs))
    else:
        future = np.full(new_steps.size, intercept + slope * x[-1])
    return np.exp(future + residuals[drawn])


TRANSFORMS: dict[str, Callable[[cases_zoo.ZooRun], Rendering]] = {
    **{f"every_{n}_points": every(n, means=False) for n in INTERVALS},
    **{f"every_{n}_means": every(n, means=True) for n in INTERVALS},
    "offset_100000": offset,
    **{f"loss_x{f:g}": loss_times(f) for f in LOSS_FACTORS},
    **{f"tag_{t.replace('/', '_')}": spelled(t) for t in TAG_SPELLINGS},
    "tensor_scalars": tensor_scalars,
    "resume_duplicate": resume_duplicate,
    "healthy_tail": healthy_tail,
}


def applies(transform: str, expected: dict, run: cases_zoo.ZooRun) -> bool:
    if transform == "healthy_tail":
        return not expected
    if transform.startswith(SUBSAMPLING_PREFIX):
        interval = int(transform.split("_")[1])
        points = transform.endswith("_points")
        return (
            "loss_spike" not in expected
            and run.loss.size // interval >= MIN_POINTS
            and not (points and _nonfinite_only_between_points(run, interval))
            and not _rise_within_blow_up_window(run, expected, interval)
            and not _start_hidden(run, interval, means=not points)
        )
    return True


def _start_hidden(run: cases_zoo.ZooRun, interval: int, means: bool) -> bool:
    """The run's first finite kept point already stands above twice its untrained loss (step 1's,
    which the reference logs and every-`interval`-th points or means do not): a blow-up within
    the first window, after which the rendering shows a loss that only falls. What a rise is
    measured from is gone (the zoo's rule 2 does not label such a log either). The same for the
    gradient norm (logged at the last step of each window in both renderings): a first kept norm
    `EXPLODE_DECADES` above step 1's leaves no start for a rise of the norm
    (rule 3 does not label such a log); the reference found those blow-ups at steps 3-6."""
    kept_loss = cases_zoo.interval_means(run.loss, interval) if means else run.loss[interval - 1 :: interval]
    return (_first_kept_above(run.loss[0], kept_loss, zoo_labels.DIVERGE_FACTOR)
            or _first_kept_above(run.grad_norm[0], run.grad_norm[interval - 1 :: interval],
                                 10.0 ** zoo_labels.EXPLODE_DECADES))


def _first_kept_above(first: float, kept: np.ndarray, factor: float) -> bool:
    """Whether the first finite kept value stands above `factor` times a finite, positive `first`."""
    kept = kept[np.isfinite(kept)]
    return bool(np.isfinite(first) and first > 0 and kept.size and kept[0] > factor * first)


def _nonfinite_only_between_points(run: cases_zoo.ZooRun, interval: int) -> bool:
    """A NaN or Inf the run recovered from, at steps that every-`interval`-th points skip: those
    points cannot show it (a mean over the window can: it turns non-finite too)."""
    bad = ~np.isfinite(run.loss) | ~np.isfinite(run.grad_norm)
    kept = np.arange(interval - 1, run.loss.size, interval)
    return bool(bad.any() and not bad[kept].any())


def _rise_within_blow_up_window(run: cases_zoo.ZooRun, expected: dict, interval: int) -> bool:
    """A labelled gradient rise that starts within one logging window of the first non-finite
    loss or norm: logged every `interval` steps, the climb and the blow-up are one window, so
    no logged point shows a norm that grew before it turned non-finite."""
    if "exploding_gradients" not in expected:
        return False
    bad = np.flatnonzero(~np.isfinite(run.loss) | ~np.isfinite(run.grad_norm))
    return bool(bad.size and abs(expected["exploding_gradients"][0] - 1 - int(bad[0])) < interval)


def scalar_value(tag: str, value: float, tensor_encoded: bool) -> Summary.Value:
    if not tensor_encoded:
        return Summary.Value(tag=tag, simple_value=value)
    return Summary.Value(
        tag=tag,
        tensor=tensor_util.make_tensor_proto(np.float32(value)),
        metadata=scalar_metadata.create_summary_metadata(display_name=tag, description=""),
    )


def write(rendering: Rendering, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    wall = WALL_START
    for index, file_rows in enumerate(rendering.files):
        writer = EventFileWriter(str(folder), max_queue_size=8192, flush_secs=3600, filename_suffix=f".{index}")
        for step, values in file_rows:
            wall += SECONDS_PER_STEP
            writer.add_event(Event(step=step, wall_time=wall, summary=Summary(
                value=[scalar_value(tag, value, rendering.tensor_encoded) for tag, value in values.items()])))
        writer.close()
        wall += 60.0  # the resumed job starts a minute later


@dataclass
class Outcome:
    transform: str
    applicable: int
    changed: list[tuple[str, set[str], set[str]]]  # run, reference verdict, transformed verdict
    # the changed runs whose verdicts differ only in kinds the zoo's own rule leaves undetermined
    # for that run (`zoo_labels.undetermined_kinds`): see `only_undetermined`
    undetermined: set[str] = field(default_factory=set)

    @property
    def held_share(self) -> float:
        return 1 - len(self.changed) / self.applicable if self.applicable else float("nan")

    @property
    def held_share_determined(self) -> float:
        """The share held when a change confined to undetermined kinds is not counted: the
        benchmark's other figures accept either verdict there, so this says how many breaks a
        detector could avoid at all. Printed beside `held_share`, never instead of it."""
        kept = len(self.changed) - len(self.undetermined)
        return 1 - kept / self.applicable if self.applicable else float("nan")


def only_undetermined(before: set[str], after: set[str], undetermined: frozenset[str]) -> bool:
    """Whether two verdicts differ only in kinds the zoo's rule cannot decide for the run at its
    own every-step resolution (rule 5's stall whose interval straddles the 5% line). Where the
    full log leaves a kind undecided, a sparser log of it holds less evidence still: a test
    that needs evidence may change its answer there (`detectors/stall.py`: "a verdict can still
    change where the change itself lies within its error of the 5% band; no rule avoids that")."""
    differing = before ^ after
    return bool(differing) and differing <= undetermined


def verdicts(root: Path) -> dict[str, set[str]]:
    from tb_health_plugin.analysis.engine import analyze_runs
    from tb_health_plugin.readers import read_logdir

    alarm = ("warning", "critical")
    return {r["run"]: {f["kind"] for f in r["findings"] if f["severity"] in alarm} for r in analyze_runs(read_logdir(root))}


def rendered_root(split: str, zoo_specs: list[dict]) -> Path:
    """Where the split's renderings are cached: they depend only on the runs' cached raw values
    (named by their specs, so a new seed gets new renderings, not the old seed's under the same
    run names) and on this module, so a re-run only analyses."""
    labelling = (Path(__file__).parent / "zoo_labels.py").read_bytes()  # which runs get which variants
    runs = "".join(cases_zoo.cached_stem(spec).name for spec in zoo_specs)
    digest = hashlib.sha1(Path(__file__).read_bytes() + labelling + cases_zoo.code_version().encode()
                          + split.encode() + runs.encode())
    return cases_zoo.cache_dir() / "rendered" / f"{split}-{digest.hexdigest()[:10]}"


def reference_labels(run: cases_zoo.ZooRun) -> dict[str, list[int]]:
    """The run's labels as its reference rendering shows it: every step's loss and gradient norm
    logged, no step times. (The run's own logging may hide a spike that the every-step reference
    shows; which runs a check applies to must follow what the reference can show.)"""
    every_step = np.arange(1, run.loss.size + 1)
    return cases_zoo.labels_as_logged(run, every_step, points=True, window_max=False, grad_norm=True,
                                      step_time=False)[0]


def render_all(runs: dict[str, cases_zoo.ZooRun], labels: dict[str, dict], root: Path) -> None:
    """Render every run not yet complete under `root`. Each run is written in a folder of this
    process's own beside `root` and renamed into place whole, so two benchmarks of one split at
    once cannot mix their event files (they did: both wrote into one folder, which then held two
    event files per rendering and changed verdicts); the first to finish keeps its rendering."""
    root.mkdir(parents=True, exist_ok=True)
    for name, run in runs.items():
        target = root / name
        if (target / "complete").exists():
            continue
        private = Path(tempfile.mkdtemp(prefix=f".{root.name}-{name}-", dir=root.parent))
        try:
            write(reference(run), private / "reference")
            for transform, render in TRANSFORMS.items():
                if applies(transform, labels[name], run):
                    write(render(run), private / transform)
            (private / "complete").write_text("")
            if target.exists() and not (target / "complete").exists():
                shutil.rmtree(target, ignore_errors=True)  # left unfinished by an interrupted earlier version
            try:
                os.rename(private, target)  # atomic; fails when another process put its rendering there first
            except OSError:
                if not (target / "complete").exists():
                    raise
        finally:
            shutil.rmtree(private, ignore_errors=True)


def check(split: str) -> list[Outcome]:
    """Render every zoo run of the split and each transformation, and compare verdicts."""
    zoo_specs = cases_zoo.specs(split)
    cases_zoo.ensure_trained(zoo_specs, cases_zoo.JOBS)
    runs = {spec["name"]: cases_zoo.load(spec) for spec in zoo_specs}
    labels = {name: reference_labels(run) for name, run in runs.items()}
    undecided = {name: zoo_labels.undetermined_kinds(labels[name], run.loss, run.lr) for name, run in runs.items()}
    root = rendered_root(split, zoo_specs)
    started = time.perf_counter()
    render_all(runs, labels, root)
    print(f"[{split}] metamorphic variants of {len(runs)} runs ready in {time.perf_counter() - started:.1f} s ({root})",
          file=sys.stderr)
    started = time.perf_counter()
    found = verdicts(root)
    print(f"[{split}] analysed them in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    outcomes = []
    for transform in TRANSFORMS:
        outcome = Outcome(transform, 0, [])
        for name in runs:
            if not applies(transform, labels[name], runs[name]):
                continue
            outcome.applicable += 1
            before, after = found.get(f"{name}/reference", set()), found.get(f"{name}/{transform}", set())
            if before != after:
                outcome.changed.append((name, before, after))
                if only_undetermined(before, after, undecided[name]):
                    outcome.undetermined.add(name)
        outcomes.append(outcome)
    return outcomes


def print_table(split: str, outcomes: list[Outcome], listed: int = 8) -> None:
    print(f"\nmetamorphic invariance ({split}): the verdict (set of warning/critical kinds) of each zoo run "
          f"against its every-step rendering; target >= {TARGET_SHARE:.0%} held. held*: not counting a change "
          f"confined to kinds the zoo's rule leaves undetermined for that run (marked *), which no test "
          f"that needs evidence can avoid")
    print(f"{'transformation':<20}{'runs':>6}{'changed':>9}{'held':>8}  {'held*':>6}  runs that break (reference -> transformed)")
    for outcome in outcomes:
        flag = "" if outcome.held_share >= TARGET_SHARE or not outcome.applicable else " <"
        shown = "; ".join(f"{name}{'*' if name in outcome.undetermined else ''} {sorted(a) or 'healthy'} -> "
                          f"{sorted(b) or 'healthy'}" for name, a, b in outcome.changed[:listed])
        more = f" (+{len(outcome.changed) - listed} more)" if len(outcome.changed) > listed else ""
        held = f"{outcome.held_share:.3f}" if outcome.applicable else "-"
        determined = f"{outcome.held_share_determined:.3f}" if outcome.applicable else "-"
        print(f"{outcome.transform:<20}{outcome.applicable:>6}{len(outcome.changed):>9}{held:>8}{flag:2}{determined:>6}  {shown}{more}")
