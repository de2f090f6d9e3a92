"""What a refresh of a logdir on object storage costs: requests and bytes, counted on the wire.

A real S3 server (moto's server mode on a loopback port) holds RUNS runs of one tfevents file
each; the readers reach it through a counting HTTP proxy (`tests/s3_server.py`). Three refreshes
of one `LogdirReader` on `s3://bench/job`:

1. cold: one listing, one ranged GET per file (all bytes once);
2. nothing changed: the listing alone;
3. GROWN runs grew by APPENDED records each (re-uploaded whole, as a sync tool does): the
   listing plus one ranged GET per grown file, fetching exactly the appended bytes.

Run: `python -m bench.bench_s3_refresh` (PYTHONPATH at the repository). Prints one line per
refresh; the listing's bytes are the XML of ListObjectsV2 (one page per 1,000 keys).
"""

from __future__ import annotations

import argparse
import sys
import time

# Parse with upb, as a TensorBoard process does: keep the test package from importing MindSpore
# (which switches protobuf to its pure-python backend).
sys.modules.setdefault("mindspore", None)

from tb_health_plugin.readers import LogdirReader  # noqa: E402
from tests.s3_server import client_env, environment, fault_proxy, moto_server, s3_client  # noqa: E402
from tests.test_storage_s3 import loss_records  # noqa: E402

RUNS = 1000
STEPS = 200  # records per run at first
GROWN = 10
APPENDED = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    records = loss_records(range(STEPS + APPENDED))
    first = b"".join(records[:STEPS])
    grown = b"".join(records)
    keys = [f"job/run_{index:04d}/events.out.tfevents.1767000000.host.{index}.0" for index in range(args.runs)]
    with moto_server() as endpoint, fault_proxy(endpoint) as proxy, environment(client_env(proxy.url)):
        client = s3_client(endpoint)
        client.create_bucket(Bucket="bench")
        started = time.perf_counter()
        for key in keys:
            client.put_object(Bucket="bench", Key=key, Body=first)
        print(f"uploaded {args.runs} runs x {len(first):,} bytes in {time.perf_counter() - started:.1f} s")
        reader = LogdirReader("s3://bench/job")

        def refresh(label: str) -> None:
            proxy.reset_counts()
            started = time.perf_counter()
            reader.refresh()
            elapsed = time.perf_counter() - started
            assert reader.problem is None, reader.problem
            listings = [r for r in proxy.requests if "list-type=2" in r.path]
            reads = [r for r in proxy.requests if r.range]
            other = len(proxy.requests) - len(listings) - len(reads)
            print(f"{label:<28} {len(proxy.requests):>5} requests: {len(listings)} listing page(s) "
                  f"({sum(r.body_bytes for r in listings):,} B), {len(reads)} ranged GETs "
                  f"({sum(r.body_bytes for r in reads):,} B), {other} other; {elapsed:.2f} s")

        refresh("cold")
        refresh("unchanged")
        for key in keys[:GROWN]:
            client.put_object(Bucket="bench", Key=key, Body=grown)
        refresh(f"{GROWN} runs grew")
        appended = GROWN * (len(grown) - len(first))
        print(f"appended bytes: {appended:,} ({GROWN} x {APPENDED} records); bucket: {args.runs * len(first) + appended:,} B")
        total_points = sum(len(reader.run(name).scalars["loss"]) for name in reader.run_names())
        assert total_points == args.runs * STEPS + GROWN * APPENDED, total_points


if __name__ == "__main__":
    main()
