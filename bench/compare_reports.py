"""JSON reports of many varied runs, kept to compare two versions of the analysis byte for byte.

    PYTHONPATH=. python -m bench.compare_reports write OUT [--logdirs DIR] [--split dev,holdout]
    PYTHONPATH=. python -m bench.compare_reports compare BEFORE AFTER

`write` builds, once, a set of logdirs in `--logdirs` (the detection benchmark's cases of every
family and split asked for, one logdir per family and split, the zoo's runs included when
`TB_HEALTH_ZOO_CACHE` holds them, sealed split left out), then runs `tb-health check --format
json --lang L` on each logdir for each language, as a user would, and stores each report in
OUT. `compare` prints how many logdirs, runs and findings the two folders hold and every
report that differs; it exits 1 when any does. A change meant to leave behaviour alone (a
refactoring) writes OUT before and after and compares them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOGDIRS = Path("/tmp/tb-health-compare-logdirs")
LANGUAGES = ("en", "zh")


def build_logdirs(root: Path, splits: list[str]) -> list[Path]:
    """One logdir per (split, family) of the detection benchmark's cases, written once."""
    from bench.detection.run import collect_cases

    logdirs = []
    for split in splits:
        by_family: dict[str, list] = {}
        for case in collect_cases(split, {"synthetic", "mindspore", "zoo"}):
            by_family.setdefault(case.family, []).append(case)
        for family, cases in sorted(by_family.items()):
            logdir = root / f"{split}-{family}"
            marker = logdir / ".complete"
            if not marker.exists():
                for case in cases:
                    if not (logdir / case.name).exists():
                        case.write(logdir / case.name)
                marker.touch()
            logdirs.append(logdir)
    return logdirs


def write_reports(out: Path, logdirs: list[Path]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for logdir in logdirs:
        for lang in LANGUAGES:
            result = subprocess.run(
                [sys.executable, "-m", "tb_health_plugin.cli", "check", "--format", "json", "--lang", lang,
                 "--progress", "never", str(logdir)],
                capture_output=True, cwd=ROOT, check=False,
            )
            if result.returncode not in (0, 1):
                raise SystemExit(f"{logdir}: exit {result.returncode}: {result.stderr.decode(errors='replace')}")
            (out / f"{logdir.name}.{lang}.json").write_bytes(result.stdout)
            print(f"{logdir.name} ({lang}): {len(result.stdout):,} bytes", file=sys.stderr, flush=True)


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    differing, runs, kinds = [], 0, Counter()
    for name in names:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()) or a.read_bytes() != b.read_bytes():
            differing.append(name)
            continue
        if name.endswith(".en.json"):
            report = json.loads(a.read_bytes())
            runs += len(report["runs"])
            kinds.update(f"{f['kind']}/{f['severity']}" for r in report["runs"] for f in r["findings"])
    print(f"{len(names)} reports ({len(names) // len(LANGUAGES)} logdirs x {len(LANGUAGES)} languages), "
          f"{runs} runs, {sum(kinds.values())} findings in the identical ones")
    for kind, count in sorted(kinds.items()):
        print(f"  {kind:<36} {count}")
    print(f"differing: {len(differing)}" + "".join(f"\n  {name}" for name in differing))
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write")
    write.add_argument("out", type=Path)
    write.add_argument("--logdirs", type=Path, default=DEFAULT_LOGDIRS)
    write.add_argument("--split", default="dev,holdout")
    both = commands.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare(args.before, args.after)
    write_reports(args.out, build_logdirs(args.logdirs, args.split.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
