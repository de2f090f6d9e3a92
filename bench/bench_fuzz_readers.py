"""A longer fuzz campaign for the readers than CI runs: inputs tried, crashes, hangs, peak memory.

The same input families and checks as `tests/test_fuzz_readers.py` (strategies from
`tests/fuzz_inputs.py`), each driven by hypothesis for an equal share of a time budget, without
shrinking. Every input is written as a run's only event file and read by `LogdirReader` under
tracemalloc and a SIGALRM watchdog:
- crash: the reader raised, or a good record of the seed was lost where it must be kept;
- hang: one input took longer than `--hang-seconds` (the alarm interrupts it);
- peak memory: tracemalloc's peak while reading, largest and largest per byte of input.

    python -m bench.bench_fuzz_readers --minutes 4
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

# Parse with upb, as a TensorBoard process does: keep the test package from importing MindSpore
# (which switches protobuf to its pure-python backend).
sys.modules.setdefault("mindspore", None)

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tb_health_plugin.readers import LogdirReader  # noqa: E402
from tests import fuzz_inputs  # noqa: E402
from tests.test_fuzz_readers import _mutate, mindspore_seed, points_of, tfevents_seed, with_inserted_records  # noqa: E402


class Hang(Exception):
    pass


class BudgetSpent(Exception):
    pass


def _alarm(_signum, _frame):
    raise Hang


class Campaign:
    def __init__(self, scratch: Path, hang_seconds: float) -> None:
        self.run_dir = scratch / "run"
        self.run_dir.mkdir()
        self.hang_seconds = hang_seconds
        self.tried: Counter = Counter()
        self.crashes: list[str] = []
        self.hangs: list[str] = []
        self.peak = (0, 0)  # (bytes, input size)
        self.worst_ratio = (0.0, 0, 0)  # (peak per input byte over a 64 KiB floor, peak, size)
        self.slowest = 0.0

    def read(self, family: str, name: str, data: bytes):
        """Read `data` as a run's only file; None after a crash or hang (recorded)."""
        for old in self.run_dir.iterdir():
            old.unlink()
        (self.run_dir / name).write_bytes(data)
        self.tried[family] += 1
        tracemalloc.start()
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, self.hang_seconds)
        try:
            reader = LogdirReader(self.run_dir)
            reader.refresh()
            run = reader.run(".") if reader.run_names() else None
        except Hang:
            self.hangs.append(f"{family}: {len(data)} bytes")
            return None
        except Exception as error:  # noqa: BLE001 - a crash is what the campaign looks for
            self.crashes.append(f"{family}: {type(error).__name__}: {error}")
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            seconds = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        self.slowest = max(self.slowest, seconds)
        if peak > self.peak[0]:
            self.peak = (peak, len(data))
        ratio = peak / max(len(data), 1 << 16)
        if ratio > self.worst_ratio[0]:
            self.worst_ratio = (ratio, peak, len(data))
        return run

    def expect(self, family: str, ok: bool, what: str) -> None:
        if not ok:
            self.crashes.append(f"{family}: {what}")


def run_family(campaign: Campaign, family: str, seconds: float, body) -> None:
    stop = time.monotonic() + seconds

    @settings(max_examples=10**9, deadline=None, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def drive(data):
        if time.monotonic() > stop:
            raise BudgetSpent
        body(data)

    try:
        drive()
    except Exception:  # the budget ends a family by raising (hypothesis may re-wrap that on replay)
        if time.monotonic() <= stop:
            raise


def families(campaign: Campaign, seeds: dict) -> dict:
    def good_points_kept(family, seed, run) -> None:
        good_tags = {(kind, tag) for kind, tag, _ in seed.all_points()}
        got = points_of(run) if run is not None else set()
        campaign.expect(family, {p for p in got if p[:2] in good_tags} == seed.all_points(), "a good record was lost")

    def mindspore_events(data):
        seed = seeds["mindspore"]
        inserts = data.draw(st.dictionaries(st.integers(0, len(seed.records)),
                                            st.lists(fuzz_inputs.mindspore_events(), min_size=1, max_size=3), max_size=4))
        run = campaign.read("mindspore events", seed.name, with_inserted_records(seed, inserts))
        if run is not None:
            good_points_kept("mindspore events", seed, run)

    def framing(fmt):
        def body(data):
            seed = seeds[fmt]
            plan = data.draw(fuzz_inputs.framing_plans(len(seed.records)))
            records = [seed.data[start : start + size] for start, size, _ in seed.records]
            run = campaign.read(f"framing damage {fmt}", seed.name, fuzz_inputs.build_framing(plan, records))
            if run is not None:
                good_points_kept(f"framing damage {fmt}", seed, run)
        return body

    def edits(fmt):
        def body(data):
            seed = seeds[fmt]
            damaged, first = _mutate(seed.data, data.draw)
            run = campaign.read(f"byte edits {fmt}", seed.name, damaged)
            if run is not None:
                campaign.expect(f"byte edits {fmt}", seed.points_before(first) <= points_of(run),
                                "a record before the damage was lost")
        return body

    def random_bytes(data):
        campaign.read("random bytes", seeds["tfevents"].name, data.draw(st.binary(max_size=1 << 14)))

    return {
        "mindspore events": mindspore_events,
        "framing damage tfevents": framing("tfevents"),
        "framing damage mindspore": framing("mindspore"),
        "byte edits tfevents": edits("tfevents"),
        "byte edits mindspore": edits("mindspore"),
        "random bytes": random_bytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="total time budget, shared by the input families")
    parser.add_argument("--hang-seconds", type=float, default=20.0, help="an input taking longer counts as a hang")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    logging.disable(logging.WARNING)  # the readers log each damaged file; the figures are what matter here
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        (scratch / "seed").mkdir()
        seeds = {"tfevents": tfevents_seed(scratch / "seed"), "mindspore": mindspore_seed()}
        campaign = Campaign(scratch, args.hang_seconds)
        started, cpu_started = time.perf_counter(), time.process_time()
        bodies = families(campaign, seeds)
        for family, body in bodies.items():
            run_family(campaign, family, args.minutes * 60 / len(bodies), body)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    from google.protobuf.internal import api_implementation

    print(f"fuzz campaign: {wall:.0f} s wall, {cpu:.0f} s CPU, {sum(campaign.tried.values())} inputs tried"
          f" (protobuf backend {api_implementation.Type()})")
    for family, count in campaign.tried.items():
        print(f"  {family}: {count}")
    print(f"crashes (raised or lost a good record): {len(campaign.crashes)}")
    for crash in campaign.crashes[:20]:
        print(f"  {crash}")
    print(f"hangs (> {args.hang_seconds:.0f} s): {len(campaign.hangs)}")
    for hang in campaign.hangs[:20]:
        print(f"  {hang}")
    print(f"peak memory: {campaign.peak[0]:,} B (reading {campaign.peak[1]:,} B); largest per input byte:"
          f" x{campaign.worst_ratio[0]:.1f} over a 64 KiB floor ({campaign.worst_ratio[1]:,} B for"
          f" {campaign.worst_ratio[2]:,} B); slowest input {campaign.slowest:.2f} s")


if __name__ == "__main__":
    main()
