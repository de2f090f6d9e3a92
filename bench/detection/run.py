"""The labelled detection benchmark: tb-health next to losslint and published spike rules.

    PYTHONPATH=. python -m bench.detection.run [--split both|dev|holdout|seen...|sealed]
        [--families synthetic,mindspore,zoo,metamorphic] [--jobs N] [--zoo-runs N] [--no-baselines] [--verbose]

Every `bench/detection/cases_*.py` module contributes `cases(split)`. Each case's logs are
written into a fresh logdir, read back with our readers and analysed with the engine; the same
runs go through losslint and the published rules. Families: "synthetic", "mindspore", "zoo"
(randomised real trainings labelled by rule, `cases_zoo`) and "metamorphic" (the zoo's verdict
invariances, `metamorphic`). Splits: "both" (= dev and holdout) and the zoo's splits
(`cases_zoo.SPLIT_SEEDS`): "dev", "holdout", "seen", "seen2", ... (the zoo's earlier sealed seeds,
now tuning data) and "sealed" (the zoo's sealed holdout: run it once, at integration, never while
tuning). Printed per split:

- per kind: run-level precision and recall (a run counts as found for a kind when it has a
  warning or critical finding of that kind);
- run-level F1 over the loss kinds, micro-averaged over (run, kind) pairs;
- spike event F1: a found spike matches every labelled one from its first to its last step (a
  finding names the span of its excursion: adjacent spiking windows are one excursion), or,
  when none lies there, the nearest within `SPIKE_TOLERANCE_POINTS` logged intervals; each
  label is matched once, and a found spike that matches no label left is a false one;
- divergence: median |found - labelled onset| in logged points;
- slow creep: median (found - labelled onset) / run length over the slowly rising divergences;
- the share of healthy runs with any warning or critical finding;
- tb-health's spike events per family (the zoo's apart from the hand-drawn synthetic spikes),
  and the zoo's by the runs' per-step log-noise (`zoo_labels.log_noise`);
- with "metamorphic": per transformation, how often a zoo run's verdict changes.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import bench.detection as detection_package
from bench.detection import baselines
from bench.detection.case import Case

LOSS_KINDS = ("nonfinite", "divergence", "loss_spike", "stalled_convergence", "overfitting")
SPIKE_TOLERANCE_POINTS = 2
ALARM = ("warning", "critical")


def collect_cases(split: str, families: set[str] | None = None) -> list[Case]:
    found = []
    for module_info in pkgutil.iter_modules(detection_package.__path__):
        if not module_info.name.startswith("cases_"):
            continue
        module = importlib.import_module(f"bench.detection.{module_info.name}")
        if split not in getattr(module, "OFFERED_SPLITS", ("dev", "holdout")):
            continue
        if families is not None and getattr(module, "FAMILY", None) not in (None, *families):
            continue  # a single-family module filtered out: do not build (or train) its cases
        if not hasattr(module, "cases"):
            print(f"skipping bench/detection/{module_info.name}.py: it has no cases(split)", file=sys.stderr)
            continue
        found.extend(c for c in module.cases(split) if families is None or c.family in families)
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise ValueError("case names must be unique")
    return found


@dataclass
class Predictions:
    """What one tool reported: case -> list of (kind, step or None); `ends` the last step of a
    finding that spans several, keyed by (case, kind, step) (tb-health's `end_step`)."""

    tool: str
    alarms: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)
    seconds: float = 0.0
    ends: dict[tuple[str, str, int], int] = field(default_factory=dict)
    # case -> kinds reported only as `info` findings `part_of` another alarm (tb-health's
    # `analysis/same_event.py`: one event, one alarm); not counted as found by any figure
    part_of: dict[str, set[str]] = field(default_factory=dict)

    def end(self, case: str, kind: str, step: int) -> int:
        return self.ends.get((case, kind, step), step)

    def kinds(self, case: str) -> set[str]:
        return {kind for kind, _ in self.alarms.get(case, [])}

    def steps(self, case: str, kind: str) -> list[int]:
        return [s for k, s in self.alarms.get(case, []) if k == kind and s is not None]


@dataclass
class RunInfo:
    interval: float
    loss_steps: np.ndarray | None
    loss_values: np.ndarray | None


def analyze_with_tb_health(root: Path, cases: list[Case]) -> tuple[Predictions, dict[str, RunInfo], dict]:
    from tb_health_plugin.analysis.engine import analyze_runs
    from tb_health_plugin.analysis.signals import RunSignals
    from tb_health_plugin.readers import read_logdir

    started = time.perf_counter()
    runs = read_logdir(root)
    reports = {r["run"]: r for r in analyze_runs(runs)}
    seconds = time.perf_counter() - started
    predictions = Predictions("tb-health", seconds=seconds)
    info = {}
    for run in runs:
        signals = RunSignals.from_run(run)
        loss = signals.loss
        interval = float(np.median(np.diff(loss.steps))) if loss is not None and len(loss) > 1 else 1.0
        info[run.name] = RunInfo(interval, None if loss is None else loss.steps, None if loss is None else loss.values)
        alarms = [f for f in reports[run.name]["findings"] if f["severity"] in ALARM]
        predictions.alarms[run.name] = [(f["kind"], f["step"]) for f in alarms]
        predictions.part_of[run.name] = {f["kind"] for f in reports[run.name]["findings"]
                                         if f["severity"] == "info" and "part_of" in (f.get("evidence") or {})}
        for f in alarms:
            if f.get("end_step") is not None and f["step"] is not None:
                key = (run.name, f["kind"], f["step"])
                predictions.ends[key] = max(predictions.ends.get(key, f["step"]), int(f["end_step"]))
    for case in cases:
        predictions.alarms.setdefault(case.name, [])
    return predictions, info, reports


def analyze_with_losslint(root: Path, cases: list[Case]) -> Predictions:
    started = time.perf_counter()
    predictions = Predictions("losslint")
    for case in cases:
        predictions.alarms[case.name] = [(a.kind, a.step) for a in baselines.losslint_alarms(root / case.name)]
    predictions.seconds = time.perf_counter() - started
    return predictions


def analyze_with_rule(name: str, rule, cases: list[Case], info: dict[str, RunInfo]) -> Predictions:
    predictions = Predictions(name)
    for case in cases:
        run = info.get(case.name)
        if run is None or run.loss_steps is None:
            predictions.alarms[case.name] = []
            continue
        predictions.alarms[case.name] = [(a.kind, a.step) for a in rule(run.loss_steps, run.loss_values)]
    return predictions


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Counts) -> None:
        self.tp, self.fp, self.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")

    @property
    def f1(self) -> float:
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else float("nan")


def run_level(cases: list[Case], predictions: Predictions, kind: str) -> Counts:
    counts = Counts()
    for case in cases:
        if kind in case.undetermined:
            continue
        labelled, found = kind in case.expected, kind in predictions.kinds(case.name)
        counts.tp += labelled and found
        counts.fp += found and not labelled
        counts.fn += labelled and not found
    return counts


def spike_events(cases: list[Case], predictions: Predictions, info: dict[str, RunInfo]) -> Counts:
    counts = Counts()
    for case in cases:
        labels = sorted(case.expected.get("loss_spike", []))
        found = sorted(set(predictions.steps(case.name, "loss_spike")))
        tolerance = SPIKE_TOLERANCE_POINTS * (info[case.name].interval if case.name in info else 1.0)
        matched = set()
        for step in found:
            end = predictions.end(case.name, "loss_spike", step)
            free = [label for label in labels if label not in matched]
            new = [label for label in free if step <= label <= end]
            if not new:  # none inside its span: the nearest within the tolerance
                near = [label for label in free if step - tolerance <= label <= end + tolerance]
                new = [min(near, key=lambda label: min(abs(label - step), abs(label - end)))] if near else []
            counts.fp += not new  # matches nothing, or only what an earlier finding did
            matched.update(new)
        counts.tp += len(matched)
        counts.fn += len(labels) - len(matched)
    return counts


def divergence_delays(cases: list[Case], predictions: Predictions, info: dict[str, RunInfo]) -> list[float]:
    delays = []
    for case in cases:
        if "divergence" not in case.expected:
            continue
        found = predictions.steps(case.name, "divergence")
        if not found:
            continue
        interval = info[case.name].interval if case.name in info else 1.0
        delays.append((min(found) - case.expected["divergence"][0]) / interval)
    return delays


def creep_delays(cases: list[Case], predictions: Predictions) -> list[float]:
    """(first divergence found - labelled onset) / run length, over slowly rising divergences."""
    delays = []
    for case in cases:
        if not case.creep or not case.steps or "divergence" not in case.expected:
            continue
        found = predictions.steps(case.name, "divergence")
        if found:
            delays.append((min(found) - case.expected["divergence"][0]) / case.steps)
    return delays


def healthy_alarm_share(cases: list[Case], predictions: Predictions) -> float:
    healthy = [c for c in cases if c.healthy]
    if not healthy:
        return float("nan")
    return sum(bool(c.scored(predictions.kinds(c.name))) for c in healthy) / len(healthy)


def any_alarm_recall(cases: list[Case], predictions: Predictions, kind: str) -> float:
    labelled = [c for c in cases if kind in c.expected]
    if not labelled:
        return float("nan")
    return sum(bool(predictions.alarms.get(c.name)) for c in labelled) / len(labelled)


def fmt(value: float, width: int = 6) -> str:
    return f"{'-':>{width}}" if value != value else f"{value:>{width}.3f}"


def print_tables(split: str, cases: list[Case], tools: list[Predictions], info: dict[str, RunInfo]) -> dict:
    kinds = sorted({k for c in cases for k in c.expected} | {k for k, _ in
                    (a for alarms in tools[0].alarms.values() for a in alarms)})
    loss_kinds = [k for k in LOSS_KINDS if any(k in c.expected for c in cases)]
    families = defaultdict(int)
    for case in cases:
        families[case.family] += 1
    healthy = sum(c.healthy for c in cases)
    undetermined = sum(bool(c.undetermined) for c in cases)
    print(f"\n== split {split}: {len(cases)} runs ({dict(families)}), {healthy} healthy, "
          f"{undetermined} with a kind undetermined (either verdict accepted, not scored) ==")
    ours = tools[0]
    print("\ntb-health per kind (run level)")
    print(f"{'kind':<22}{'runs':>6}{'prec':>8}{'recall':>8}{'F1':>8}")
    for kind in kinds:
        c = run_level(cases, ours, kind)
        labelled = sum(kind in case.expected for case in cases)
        print(f"{kind:<22}{labelled:>6}{fmt(c.precision, 8)}{fmt(c.recall, 8)}{fmt(c.f1, 8)}")
    print_said_once(cases, ours)
    header = (f"{'tool':<20}" + "".join(f"{k[:10]:>11}" for k in loss_kinds)
              + f"{'runF1':>8}{'allF1':>7}{'spikeEvF1':>10}{'spikeP':>8}{'spikeR':>8}{'divDelay':>9}{'creep':>7}{'divAny':>8}"
              f"{'healthyFA':>10}{'sec':>7}")
    print("\nside by side: per-kind run-level F1, loss kinds together, all labelled kinds together, spike events, "
          "divergence delay (median |found-onset| in logged points), slow-creep delay (median share of the run), "
          "any alarm on diverging runs, healthy runs with alarms")
    print(header)
    summary = {}
    for tool in tools:
        total = Counts()
        cells = []
        for kind in loss_kinds:
            c = run_level(cases, tool, kind)
            total.add(c)
            cells.append(fmt(c.f1, 11))
        every_kind = Counts()
        for kind in kinds:
            every_kind.add(run_level(cases, tool, kind))
        creep = creep_delays(cases, tool)
        median_creep = float(np.median(creep)) if creep else float("nan")
        events = spike_events(cases, tool, info)
        delays = divergence_delays(cases, tool, info)
        median_delay = float(np.median(np.abs(delays))) if delays else float("nan")
        share = healthy_alarm_share(cases, tool)
        print(f"{tool.tool:<20}" + "".join(cells) + f"{fmt(total.f1, 8)}{fmt(every_kind.f1, 7)}{fmt(events.f1, 10)}"
              f"{fmt(events.precision, 8)}{fmt(events.recall, 8)}{fmt(median_delay, 9)}{fmt(median_creep, 7)}{fmt(any_alarm_recall(cases, tool, 'divergence'), 8)}"
              f"{fmt(share, 10)}{tool.seconds:>7.1f}")
        summary[tool.tool] = {"run_f1": total.f1, "all_kinds_f1": every_kind.f1, "spike_event_f1": events.f1,
                              "divergence_median_delay": median_delay, "creep_median_delay": median_creep,
                              "healthy_alarm_share": share}
    print_spike_events_by_family(cases, ours, info)
    return summary


def print_said_once(cases: list[Case], predictions: Predictions) -> None:
    """Of the labelled kinds missed, those the report names as part of another alarm: an event
    the labels count under two kinds (a NaN episode and the finite blow-up around it) and the
    report under one (`analysis/same_event.py`). Counted as missed by every figure; printed so
    a reader can tell this convention from a blind spot."""
    missed, said = Counter(), Counter()
    for case in cases:
        found = case.scored(predictions.kinds(case.name))
        for kind in case.scored(set(case.expected)) - found:
            missed[kind] += 1
            said[kind] += kind in predictions.part_of.get(case.name, set())
    if +said:  # the kinds with a count above zero
        print("  missed but reported as part of another alarm (one event, one alarm): " + ", ".join(
            f"{kind} {said[kind]} of {missed[kind]}" for kind in sorted(+said)))


NOISE_BANDS = ((0.0, 0.2), (0.2, 0.8), (0.8, np.inf))  # zoo runs by per-step log-noise sd


def print_spike_events_by_family(cases: list[Case], predictions: Predictions, info: dict[str, RunInfo]) -> None:
    """tb-health's spike events per family: the pooled figure is mostly the synthetic family's,
    whose spikes were drawn by hand; the zoo's are what real trainings did. The zoo's again by
    the runs' per-step log-noise (`Case.noise`): its spike label is a rarity rule, which wide
    noise passes by chance, so where the noise is wide the label itself is loose (README, the
    row "spikes beside a NaN, and rare jumps")."""
    print("\ntb-health spike events by family (labelled, found, matched, precision, recall, F1)")
    groups = [(family, [c for c in cases if c.family == family]) for family in sorted({c.family for c in cases})]
    zoo = [c for c in cases if c.family == "zoo"]
    if zoo:
        for low, high in NOISE_BANDS:
            band = [c for c in zoo if c.noise is not None and low <= c.noise < high]
            groups.append((f"zoo sd {low:g}-{high:g}".replace("-inf", "+"), band))
        # too few finite positive steps to tell (mostly runs that went NaN)
        groups.append(("zoo sd unknown", [c for c in zoo if c.noise is None]))
    for name, members in groups:
        labelled = sum(len(c.expected.get("loss_spike", [])) for c in members)
        counts = spike_events(members, predictions, info)
        if labelled or counts.fp:
            print(f"  {name:<16}{labelled:>5}{counts.tp + counts.fp:>6}{counts.tp:>6}"
                  f"{fmt(counts.precision, 8)}{fmt(counts.recall, 8)}{fmt(counts.f1, 8)}")


def misses(cases: list[Case], predictions: Predictions) -> list[str]:
    lines = []
    for case in cases:
        found = case.scored(predictions.kinds(case.name))
        missing = case.scored(set(case.expected)) - found
        extra = found - set(case.expected)
        spikes = sorted(set(predictions.steps(case.name, "loss_spike")))
        labelled = sorted(case.expected.get("loss_spike", []))
        note = f"  [{case.note}]" if case.note else ""
        if missing or extra:
            lines.append(f"  {case.name}: missed {sorted(missing)} extra {sorted(extra)}{note}")
        elif labelled and len(spikes) != len(labelled):
            lines.append(f"  {case.name}: spikes labelled at {labelled}, found at {spikes}")
    return lines


def run_split(split: str, families: set[str] | None, with_baselines: bool, verbose: bool, keep: Path | None) -> dict:
    cases = collect_cases(split, families)
    summary: dict = {}
    if cases:
        summary = analyze_cases(split, cases, with_baselines, verbose, keep)
    if families is None or "metamorphic" in families:
        from bench.detection import metamorphic

        outcomes = metamorphic.check(split)
        metamorphic.print_table(split, outcomes)
        summary["metamorphic"] = {o.transform: o.held_share for o in outcomes}
        summary["metamorphic_determined"] = {o.transform: o.held_share_determined for o in outcomes}
    return summary


def analyze_cases(split: str, cases: list[Case], with_baselines: bool, verbose: bool, keep: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"tbh-bench-{split}-") as scratch:
        root = (keep / split) if keep else Path(scratch)
        started = time.perf_counter()
        for case in cases:
            case.write(root / case.name)
        print(f"[{split}] wrote {len(cases)} runs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        ours, info, _ = analyze_with_tb_health(root, cases)
        tools = [ours]
        if with_baselines:
            tools.append(analyze_with_losslint(root, cases))
            tools.extend(analyze_with_rule(name, rule, cases, info) for name, rule in baselines.RULES.items())
        summary = print_tables(split, cases, tools, info)
        if verbose:
            print("\ntb-health mistakes:")
            print("\n".join(misses(cases, ours)) or "  none")
    return summary


def main(argv: list[str] | None = None) -> int:
    from bench.detection import cases_zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("both", *cases_zoo.OFFERED_SPLITS), default="both",
                        help="both = dev and holdout; seen, seen2, ... = the zoo's earlier sealed seeds; "
                             "sealed = the zoo's sealed holdout (run once, at integration)")
    parser.add_argument("--families", default="synthetic,mindspore,zoo,metamorphic",
                        help="comma-separated: synthetic, mindspore, zoo, metamorphic")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes training missing zoo runs (2 halves the first run on 2 free cores)")
    parser.add_argument("--zoo-runs", type=int, help="only the first N zoo runs of each split (quick iterations)")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="list every run tb-health got wrong")
    parser.add_argument("--keep", type=Path, help="write the logdirs here instead of a temporary folder")
    args = parser.parse_args(argv)
    splits = ("dev", "holdout") if args.split == "both" else (args.split,)
    families = set(args.families.split(","))
    cases_zoo.JOBS = max(1, args.jobs)
    cases_zoo.LIMIT = args.zoo_runs
    for split in splits:
        run_split(split, families, not args.no_baselines, args.verbose, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
