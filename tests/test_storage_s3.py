"""Logs on object storage, read in place: a real S3 server (moto's server mode on a loopback
port), real clients (s3fs for our readers, TensorBoard's own boto3 reader), and a real HTTP proxy
in front of the server that counts requests and injects throttling or dropped connections.

What must hold: the tab and `tb-health check` on `s3://bucket/prefix` say what they say on a local
copy; a refresh lists once and fetches only new bytes with ranged reads; a failing store gives a
message (tab and CLI) and a retry, and never loses what was read before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from tb_health_plugin.commands.check import check_logdir
from tb_health_plugin.readers import LogdirReader, read_logdir
from tb_health_plugin.service import HealthService
from tests.browser import HealthTab, chromium, chromium_path, new_page
from tests.eventlogs import write_scalars
from tests.readers_fixtures import event, scalar_value
from tests.s3_server import (
    REGION,
    client_env,
    environment,
    fault_proxy,
    moto_server,
    s3_client,
    upload_tree,
)
from tests.tensorboard_server import get_json, running_tensorboard

ROOT = Path(__file__).resolve().parents[1]
CLI_GUARD_S = 300  # a hang guard, far above an honest run (the CLI's retries wait 14 s in all)
BUCKET, PREFIX = "training-logs", "job-42"


def frame(payload: bytes) -> bytes:
    from tb_health_plugin.tfrecord import masked_crc

    length = len(payload).to_bytes(8, "little")
    return length + masked_crc(length).to_bytes(4, "little") + payload + masked_crc(payload).to_bytes(4, "little")


def loss_records(steps) -> list[bytes]:
    return [frame(event(int(s), scalar_value("loss", 2.0 / (1 + s / 50.0)), wall_time=1_767_000_000.0 + s)
                  .SerializeToString()) for s in steps]


def write_job(root: Path) -> None:
    """A healthy run, a run that diverges to NaN, and a two-rank job (cross-rank checks)."""
    steps = np.arange(300)
    write_scalars(root / "healthy", {"train/loss": (steps, 2.0 / (1 + steps / 50.0)),
                                     "train/lr": (steps, np.full(300, 1e-3))})
    diverging = np.where(steps < 200, 2.0 / (1 + steps / 50.0), np.exp((steps - 200) / 10.0))
    diverging[280:] = np.nan
    write_scalars(root / "diverging", {"train/loss": (steps, diverging)})
    for rank in (0, 1):
        write_scalars(root / "multi" / f"rank_{rank}", {"loss": (steps, 2.5 / (1 + steps / 40.0) + 0.01 * rank)})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(endpoint, proxy, local copy) with the job uploaded to s3://BUCKET/PREFIX."""
    local = tmp_path_factory.mktemp("local-copy")
    write_job(local)
    with moto_server() as endpoint, fault_proxy(endpoint) as proxy:
        client = s3_client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        upload_tree(client, BUCKET, local, PREFIX)
        yield endpoint, proxy, local


@pytest.fixture
def through_proxy(store):
    """This process reads the store through the proxy, which is healthy again afterwards."""
    _, proxy, _ = store
    proxy.inject(None)
    with environment(client_env(proxy.url)):
        yield proxy
    proxy.inject(None)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=CLI_GUARD_S, check=False)


def without_logdir(report: dict) -> list:
    return report["runs"]


# ----- same findings as a local copy


def test_check_on_a_bucket_reports_what_it_reports_on_a_local_copy(store):
    endpoint, _, local = store
    remote = cli("check", f"s3://{BUCKET}/{PREFIX}", "--format", "json", env=client_env(endpoint))
    assert remote.returncode in (0, 1), remote.stderr
    assert "Traceback" not in remote.stderr
    expected = check_logdir(str(local))
    got = json.loads(remote.stdout)
    assert got["logdir"] == f"s3://{BUCKET}/{PREFIX}"
    assert without_logdir(got) == json.loads(json.dumps(without_logdir(expected)))
    statuses = {run["run"]: run["status"] for run in got["runs"]}
    assert statuses["diverging"] == "critical" and statuses["healthy"] == "healthy", statuses


def test_the_tab_in_tensorboard_on_a_bucket_matches_a_local_copy(store):
    _, proxy, local = store
    with environment(client_env(proxy.url)), running_tensorboard(f"s3://{BUCKET}/{PREFIX}") as base:
        health = get_json(base + "/data/plugin/health/runs", timeout=180)
        assert health["storage"] is None
        expected = {run["run"]: run for run in check_logdir(str(local))["runs"]}
        assert sorted(run["run"] for run in health["runs"]) == sorted(expected)
        for name, want in expected.items():
            report = get_json(base + f"/data/plugin/health/report?run={quote(name)}", timeout=60)["runs"][0]
            assert report == json.loads(json.dumps(want)), name
        # TensorBoard itself reads the same bucket (its own S3 reader): same runs, every point.
        scalars = base + f"/data/plugin/scalars/scalars?run=healthy&tag={quote('train/loss')}"
        deadline = time.monotonic() + 120
        while True:  # TensorBoard loads in the background: wait until it has
            try:
                points = get_json(scalars)
                break
            except urllib.error.HTTPError as error:
                assert error.code == 404 and time.monotonic() < deadline, error
                time.sleep(0.5)
        assert len(points) == 300
        assert sorted(get_json(base + "/data/runs")) == sorted(expected)


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_tab_says_when_the_store_throttles_and_keeps_the_runs_read_before(store):
    _, proxy, _ = store
    proxy.inject(None)
    banner = "w => { const b = w.document.querySelector('.storage-problem'); return b && !b.hidden && b.textContent; }"
    rows = "w => w.document.querySelectorAll('tr.run-row').length"
    with environment(client_env(proxy.url)), running_tensorboard(f"s3://{BUCKET}/{PREFIX}") as base:
        get_json(base + "/data/plugin/health/runs", timeout=180)
        with chromium() as browser, new_page(browser) as page:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            tab = HealthTab(page, base).open()
            tab.wait_until(f"w => ({rows})(w) === 4", timeout_s=120)
            assert not tab.eval(banner)
            try:
                proxy.inject("slowdown")
                text = tab.wait_until(banner, timeout_s=120)
                assert "throttling" in text and "Retrying in" in text and "still shown" in text, text
                assert tab.eval(rows) == 4  # what was read before stays on screen
                tab.screenshot("storage-throttled")
            finally:
                proxy.inject(None)
            tab.wait_until(f"w => !({banner})(w)", timeout_s=180)  # the store is back: the banner goes
            assert tab.eval(rows) == 4
            assert errors == []


# ----- incremental: one listing, ranged reads of new bytes only


def test_a_refresh_lists_once_and_reads_only_the_new_bytes_of_a_grown_object(store, through_proxy):
    endpoint, proxy, _ = store
    client = s3_client(endpoint)
    client.create_bucket(Bucket="growing")
    key = "live/run/events.out.tfevents.1767000000.host.1.0"
    records = loss_records(range(400))
    first_part = b"".join(records[:150]) + records[150][:20]  # the last record cut mid-way, as a sync can
    client.put_object(Bucket="growing", Key=key, Body=first_part)
    reader = LogdirReader("s3://growing/live")

    proxy.reset_counts()
    reader.refresh()
    assert reader.problem is None
    assert len(reader.run("run").scalars["loss"]) == 150
    consumed = sum(len(r) for r in records[:150])
    listing, *reads = proxy.requests
    assert "list-type=2" in listing.path
    assert reads[0].range == f"bytes=0-{len(first_part) - 1}"
    # The unfinished record is looked at again (is it a lying length?), never what was decoded.
    assert all(int(r.range.split("=")[1].split("-")[0]) >= consumed for r in reads[1:]), reads
    assert sum(r.body_bytes for r in reads[1:]) <= 2 * (len(first_part) - consumed)

    proxy.reset_counts()
    assert reader.refresh() is False  # nothing changed: the listing alone
    assert len(proxy.requests) == 1 and "list-type=2" in proxy.requests[0].path, proxy.requests

    whole = b"".join(records)
    client.put_object(Bucket="growing", Key=key, Body=whole)  # a sync uploads the grown file again
    proxy.reset_counts()
    assert reader.refresh() is True
    listing, read = proxy.requests
    assert "list-type=2" in listing.path
    assert read.range == f"bytes={consumed}-{len(whole) - 1}"
    assert read.body_bytes == len(whole) - consumed
    steps = reader.run("run").scalars["loss"].steps
    assert steps.tolist() == list(range(400))


def test_many_grown_objects_cost_one_ranged_read_each_fetched_together(store, through_proxy):
    """Reads of several grown files are sent together (`Storage.prefetch`): still one ranged GET
    per file, from where its data ends, and every point arrives once."""
    endpoint, proxy, _ = store
    client = s3_client(endpoint)
    client.create_bucket(Bucket="many")
    records = loss_records(range(120))
    keys = [f"job/run_{index}/events.out.tfevents.1767000000.host.{index}.0" for index in range(6)]
    for key in keys:
        client.put_object(Bucket="many", Key=key, Body=b"".join(records[:80]))
    reader = LogdirReader("s3://many/job")
    proxy.reset_counts()
    reader.refresh()
    reads = [r for r in proxy.requests if r.range]
    assert len(proxy.requests) == 1 + len(keys) and len(reads) == len(keys)
    assert {r.range for r in reads} == {f"bytes=0-{len(b''.join(records[:80])) - 1}"}
    for key in keys[:4]:
        client.put_object(Bucket="many", Key=key, Body=b"".join(records))
    proxy.reset_counts()
    reader.refresh()
    reads = [r for r in proxy.requests if r.range]
    old, new = len(b"".join(records[:80])), len(b"".join(records))
    assert len(proxy.requests) == 5 and [r.range for r in reads] == [f"bytes={old}-{new - 1}"] * 4
    assert sum(r.body_bytes for r in reads) == 4 * (new - old)
    lengths = {name: reader.run(name).scalars["loss"].steps.tolist() for name in reader.run_names()}
    assert lengths == {f"run_{i}": list(range(120 if i < 4 else 80)) for i in range(6)}


def test_the_service_keeps_what_it_read_and_says_why_while_the_store_throttles(store, through_proxy):
    proxy = through_proxy
    service = HealthService(f"s3://{BUCKET}/{PREFIX}")
    service.refresh_now()
    before = {name: service._reader.run(name) for name in service._reader.run_names()}
    assert len(before) == 4 and service.storage_status() is None

    for fault, words in (("slowdown", "throttling"), ("drop", "connection")):
        proxy.inject(fault)
        service.refresh_now()
        status = service.storage_status()
        assert status is not None and words in status["message"], status
        assert status["message"].startswith(f"s3://{BUCKET}/{PREFIX}")
        assert service._reader.run_names() == sorted(before)  # nothing read before is lost
        for name, data in before.items():
            assert service._reader.run(name) is data
    assert service.storage_status()["failures"] == 2
    assert service._backoff.wait_s(service.refresh_interval_s) > service.refresh_interval_s  # the next attempt backs off

    proxy.inject(None)
    service.refresh_now()
    assert service.storage_status() is None
    assert service._backoff.wait_s(service.refresh_interval_s) == service.refresh_interval_s


def test_a_store_failing_mid_read_keeps_the_runs_read_so_far(store, through_proxy):
    """The listing succeeds, then the connection drops on the ranged read of a new run: the runs
    read before keep their data, and the new one is read on the next refresh."""
    endpoint, proxy, _ = store
    reader = LogdirReader(f"s3://{BUCKET}/{PREFIX}")
    reader.refresh()
    before = {name: reader.run(name) for name in reader.run_names()}
    late = f"{PREFIX}/late/events.out.tfevents.1767000001.h.1.0"
    s3_client(endpoint).put_object(Bucket=BUCKET, Key=late, Body=b"".join(loss_records(range(50))))
    try:
        proxy.inject("drop", skip=1)  # the listing passes, every read after it is dropped
        reader.refresh()
        assert reader.problem is not None and "connection" in reader.problem, reader.problem
        assert reader.run_names() == sorted(before)
        assert all(reader.run(name) is data for name, data in before.items())
        proxy.inject(None)
        reader.refresh()
        assert reader.problem is None
        assert len(reader.run("late").scalars["loss"]) == 50
    finally:
        s3_client(endpoint).delete_object(Bucket=BUCKET, Key=late)


def test_the_hooks_write_to_a_bucket_and_the_reader_takes_each_flush_as_it_arrives(store, through_proxy):
    """`HealthLogger(log_dir="s3://...")` writes through TensorBoard's own writer, which uploads
    the whole file at each flush (objects cannot be appended to); each refresh reads only what
    the flush added."""
    from trainer_hooks import HealthLogger

    endpoint, proxy, _ = store
    s3_client(endpoint).create_bucket(Bucket="hooks")
    logger = HealthLogger("s3://hooks/job", collect_freq=1, rank=0, world_size=1, online_analysis=False)
    reader = LogdirReader("s3://hooks/job")
    try:
        for step in range(1, 61):
            logger.log_step(step, 2.0 / (1 + step / 20), lr=1e-3, grad_norm=1.0)
        logger.flush()
        reader.refresh()
        assert reader.run_names() == ["rank_0"] and reader.problem is None
        loss_tag = next(tag for tag in reader.run("rank_0").scalars if tag.endswith("loss"))
        assert reader.run("rank_0").scalars[loss_tag].steps.tolist() == list(range(1, 61))
        for step in range(61, 121):
            logger.log_step(step, 2.0 / (1 + step / 20), lr=1e-3, grad_norm=1.0)
        logger.flush()
        proxy.reset_counts()
        reader.refresh()
        (read,) = [r for r in proxy.requests if r.range]
        assert not read.range.startswith("bytes=0-")  # the new bytes only
        assert reader.run("rank_0").scalars[loss_tag].steps.tolist() == list(range(1, 121))
    finally:
        logger.close()


# ----- failures in the CLI: one clear line, a retry, never a traceback


def test_an_unknown_protocol_is_one_line_not_a_traceback():
    result = cli("check", "nosuchprotocol://bucket/job", env={})
    assert result.returncode == 2
    assert "cannot read nosuchprotocol:// URLs" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_check_says_no_such_bucket_without_a_traceback(store):
    endpoint, _, _ = store
    result = cli("check", "s3://no-such-bucket/job", env=client_env(endpoint))
    assert result.returncode == 2
    assert "no such bucket" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""


def test_check_retries_a_throttling_store_and_then_reports(store):
    endpoint, proxy, local = store
    proxy.inject("slowdown")
    process = subprocess.Popen(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", f"s3://{BUCKET}/{PREFIX}", "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **client_env(proxy.url)},
    )
    try:
        first_line = process.stderr.readline()  # the CLI says it is retrying: the store recovers
        proxy.inject(None)
        stdout, rest = process.communicate(timeout=CLI_GUARD_S)
    finally:
        proxy.inject(None)
        if process.poll() is None:
            process.kill()
    assert "throttling" in first_line and "retrying in 2 s" in first_line, first_line
    assert process.returncode in (0, 1), rest
    assert "Traceback" not in rest
    assert json.loads(stdout)["runs"] == json.loads(json.dumps(check_logdir(str(local))["runs"]))


def test_wrong_credentials_are_said_as_such(store):
    """moto checks credentials once its IAM authentication is on: a user made with a key that may
    read S3 reads the bucket; a key the server does not know gets access denied (CLI and service)."""
    from moto import settings

    endpoint, _, _ = store
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    saved = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        good = client_env(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        with environment(good):
            assert len(read_logdir(f"s3://{BUCKET}/{PREFIX}")) == 4
        wrong = client_env(endpoint, "AKIAWRONGWRONGWRONG1", "wrong-secret")
        with environment(wrong):
            service = HealthService(f"s3://{BUCKET}/{PREFIX}")
            service.refresh_now()
            assert "access denied" in service.storage_status()["message"]
            assert service._reader.run_names() == []
        result = cli("check", f"s3://{BUCKET}/{PREFIX}", env=wrong)
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = saved
    assert result.returncode == 2
    assert "access denied" in result.stderr and "check the credentials" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "gave up after 4 attempts" in result.stderr


def test_convert_reads_mindspore_summaries_from_a_bucket(store, tmp_path):
    from tb_health_plugin.readers.schema import MsEvent

    endpoint, _, _ = store
    header = MsEvent(wall_time=1_767_000_000.0, version="MindSpore.Event:1")
    events = [header]
    for step in range(20):
        ms_event = MsEvent(wall_time=1_767_000_000.0 + step, step=step)
        ms_event.summary.value.add(tag="loss", scalar_value=1.0 / (1 + step))
        events.append(ms_event)
    name = "events.out.events.summary.1767000000.0.host_MS"
    s3_client(endpoint).put_object(Bucket=BUCKET, Key=f"ms-job/rank_0/{name}",
                                   Body=b"".join(frame(e.SerializeToString()) for e in events))
    result = cli("convert", f"s3://{BUCKET}/ms-job", str(tmp_path / "out"), env=client_env(endpoint))
    assert result.returncode == 0, result.stderr
    (converted,) = read_logdir(tmp_path / "out")
    assert converted.name == "rank_0"
    assert converted.scalars["loss"].steps.tolist() == list(range(20))


@pytest.mark.parametrize("port", [40359, 45031, 1403, 9000])
def test_a_dropped_connection_reads_as_one_whatever_the_endpoint_s_digits(port):
    """An endpoint's port or an object's name holding 403 or 503 is no HTTP status: a fault proxy
    on port 40359 once made a dropped connection read as "access denied"."""
    from botocore.exceptions import ConnectionClosedError

    from tb_health_plugin.readers.storage import describe

    url = f"http://127.0.0.1:{port}/{BUCKET}/{PREFIX}/run/events.out.tfevents.1767000403.h.503.0"
    message = describe(ConnectionClosedError(endpoint_url=url), f"s3://{BUCKET}/{PREFIX}")
    assert "connection to the store failed" in message, message


@pytest.mark.parametrize(("status", "code", "words"), [
    (403, "AccessDenied", "access denied"), (403, "403", "access denied"),
    (503, "SlowDown", "throttling"), (503, "503", "throttling"),
])
def test_the_store_s_http_status_names_the_failure(status, code, words):
    from botocore.exceptions import ClientError

    from tb_health_plugin.readers.storage import describe

    error = ClientError({"Error": {"Code": code, "Message": ""}, "ResponseMetadata": {"HTTPStatusCode": status}},
                        "ListObjectsV2")
    assert words in describe(error, f"s3://{BUCKET}/{PREFIX}")
