"""Notifications through a real HTTP server (and a real SMTP server): each service's documented
body and signature, retries, rate limits, one message per finding per job, and never a stall or
a crash of the caller."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import threading
import urllib.parse

import jsonschema
import pytest

from tb_health_plugin.notify import Alert, JobDeduplicator, Notifier, Sink, alerts_from_report, compose
from tb_health_plugin.notify.formats import Message
from tb_health_plugin.notify.sinks import ConfigError, DeliveryError, deliver, sinks_from_config
from tests.tensorboard_server import free_port
from tests.webhook_receiver import webhook_receiver

TEXT = {"type": "string", "minLength": 1}
FEISHU_ELEMENT = {"type": "object", "required": ["tag"], "properties": {
    "tag": {"enum": ["text", "a", "at", "img"]}, "text": {"type": "string"}, "href": {"type": "string"}}}
FEISHU_POST = {"type": "object", "minProperties": 1, "additionalProperties": {
    "type": "object", "required": ["title", "content"],
    "properties": {"title": TEXT, "content": {"type": "array", "items": {"type": "array", "items": FEISHU_ELEMENT}}}}}
# The request bodies as each service documents them (custom robot / incoming webhook pages).
SCHEMAS = {
    "dingtalk": {
        "type": "object", "required": ["msgtype", "markdown"],
        "properties": {"msgtype": {"const": "markdown"},
                       "markdown": {"type": "object", "required": ["title", "text"],
                                    "properties": {"title": TEXT, "text": TEXT}}},
    },
    "feishu": {
        "type": "object", "required": ["msg_type", "content"],
        "properties": {
            "msg_type": {"const": "post"},
            "timestamp": {"type": "string", "pattern": "^[0-9]+$"},
            "sign": TEXT,
            "content": {"type": "object", "required": ["post"], "properties": {"post": FEISHU_POST}},
        },
    },
    "wecom": {
        "type": "object", "required": ["msgtype", "markdown"],
        "properties": {"msgtype": {"const": "markdown"},
                       "markdown": {"type": "object", "required": ["content"],
                                    "properties": {"content": {"type": "string", "minLength": 1, "maxLength": 4096}}}},
    },
    "slack": {
        "type": "object", "required": ["text"],
        "properties": {"text": TEXT, "blocks": {"type": "array", "items": {
            "type": "object", "required": ["type", "text"],
            "properties": {"type": {"const": "section"}, "text": {
                "type": "object", "required": ["type", "text"],
                "properties": {"type": {"const": "mrkdwn"}, "text": {"type": "string", "maxLength": 3000}}}}}}},
    },
    "webhook": {
        "type": "object", "required": ["source", "title", "text", "alerts"],
        "properties": {"source": {"const": "tb-health"}, "alerts": {"type": "array", "minItems": 1}},
    },
}


def alert(rank=0, step=500, kind="divergence", severity="critical", job="exp", last_step=1000) -> Alert:
    return Alert(job=job, run=f"{job}/rank_{rank}", rank=rank, kind=kind, severity=severity, step=step,
                 tag="train/loss", text="The loss rose 40x above its trend.", last_step=last_step,
                 link="http://tb.example:6006/#health&run=exp%2Frank_0")


def message() -> Message:
    return compose([alert()])[0]


def no_sleep(waits):
    return waits.append


@pytest.mark.parametrize("kind", ["dingtalk", "feishu", "wecom", "slack", "webhook"])
def test_each_service_gets_its_documented_body(kind):
    with webhook_receiver() as receiver:
        deliver(Sink(kind, url=receiver.url + "/hook", secret="SEC-test" if kind in ("dingtalk", "feishu") else None),
                message())
        assert receiver.wait_for(1)
    body = receiver.requests[0].body
    jsonschema.validate(body, SCHEMAS[kind])
    assert "divergence" in str(body) and "step 500" in str(body)
    assert receiver.requests[0].headers["Content-Type"].startswith("application/json")


def test_dingtalk_signature_is_the_documented_hmac():
    with webhook_receiver() as receiver:
        deliver(Sink("dingtalk", url=receiver.url + "/robot/send?access_token=T0KEN", secret="SECabc"), message(),
                now=1_700_000_000.123)
        assert receiver.wait_for(1)
    query = receiver.requests[0].query
    assert query["access_token"] == "T0KEN" and query["timestamp"] == "1700000000123"
    expected = hmac.new(b"SECabc", b"1700000000123\nSECabc", hashlib.sha256).digest()
    assert base64.b64decode(query["sign"]) == expected  # parse_qsl already undid the URL encoding


def test_feishu_signature_is_the_documented_hmac():
    with webhook_receiver() as receiver:
        deliver(Sink("feishu", url=receiver.url + "/open-apis/bot/v2/hook/x", secret="s3"), message(), now=1_599_360_473)
        assert receiver.wait_for(1)
    body = receiver.requests[0].body
    assert body["timestamp"] == "1599360473"
    expected = hmac.new(b"1599360473\ns3", b"", hashlib.sha256).digest()
    assert base64.b64decode(body["sign"]) == expected


@pytest.mark.parametrize("kind, answer, retriable", [
    ("dingtalk", {"errcode": 310000, "errmsg": "sign not match"}, False),
    ("dingtalk", {"errcode": 130101, "errmsg": "send too fast"}, True),
    ("wecom", {"errcode": 45009, "errmsg": "api freq out of limit"}, True),
    ("feishu", {"code": 19021, "msg": "sign match fail"}, False),
])
def test_an_error_code_in_a_200_answer_is_a_failure(kind, answer, retriable):
    with webhook_receiver() as receiver:
        receiver.default = (200, answer)
        with pytest.raises(DeliveryError) as raised:
            deliver(Sink(kind, url=receiver.url), message())
    assert raised.value.retriable is retriable


def test_throttling_and_server_errors_are_retried_with_back_off():
    waits: list[float] = []
    with webhook_receiver() as receiver:
        receiver.answers = [(503, "busy"), (200, {"errcode": 130101, "errmsg": "send too fast"}), (429, "slow down")]
        notifier = Notifier([Sink("dingtalk", url=receiver.url)], sleep=waits.append)
        notifier.submit([alert()])
        assert notifier.flush(60)
        notifier.close()
    assert len(receiver.requests) == 4 and notifier.sent == 1
    assert waits == [1.0, 2.0, 4.0]  # doubling back-off between the four attempts


def test_a_failing_sink_is_reported_once_and_never_reaches_the_caller(caplog):
    with webhook_receiver() as receiver:
        receiver.default = (404, "no such robot")
        notifier = Notifier([Sink("slack", url=receiver.url + "/services/T0KEN-SECRET")], sleep=lambda s: None)
        with caplog.at_level(logging.WARNING, logger="tb_health.notify"):
            for step in (100, 300, 700):
                notifier.submit([alert(step=step)])
                assert notifier.flush(60)
        notifier.close()
    failures = [r for r in caplog.records if "cannot send notifications to slack" in r.getMessage()]
    assert len(failures) == 1 and "HTTP 404" in failures[0].getMessage()
    assert "T0KEN" not in caplog.text  # the URL carries the token: it is never logged
    assert len(receiver.requests) == 3  # a final error is not retried


def test_submit_returns_while_the_server_is_still_answering():
    with webhook_receiver() as receiver:
        receiver.hold = threading.Event()
        notifier = Notifier([Sink("webhook", url=receiver.url)], sleep=lambda s: None)
        notifier.submit([alert()])  # the server holds the request until `hold` is set
        assert notifier.sent == 0 and not receiver.requests
        receiver.hold.set()
        assert notifier.flush(60) and receiver.wait_for(1)
        notifier.close()
    assert notifier.sent == 1


def test_many_findings_at_once_become_one_summary_per_job():
    alerts = [alert(step=100 * i, kind=kind) for i, kind in enumerate(
        ["loss_spike", "loss_spike", "exploding_gradients", "divergence", "nonfinite"], start=1)]
    alerts.append(alert(job="other", step=50))
    messages = compose(alerts)
    assert len(messages) == 2
    summary = next(m for m in messages if "5 new findings" in m.title)
    assert summary.title.startswith("[CRITICAL]") and len(summary.lines) == 5 and len(summary.alerts) == 5
    assert compose(alerts, "zh")[0].title.startswith("[严重]")


def test_one_message_per_finding_per_job_across_ranks_and_refreshes():
    dedup = JobDeduplicator()
    first = dedup.new([alert(rank=0, step=500), alert(rank=1, step=510), alert(rank=2, step=900)])
    assert [(a.rank, a.step, a.other_ranks) for a in first] == [(0, 500, (1,)), (2, 900, ())]
    # the next refresh moves rank 0's onset by one logging interval and adds rank 3: nothing new
    assert dedup.new([alert(rank=0, step=490), alert(rank=3, step=505)]) == []
    restarted = JobDeduplicator(dedup.state())  # a restarted watcher remembers
    assert restarted.new([alert(rank=1, step=500)]) == []
    assert len(restarted.new([alert(rank=1, step=500, kind="loss_spike")])) == 1


def test_alerts_come_from_a_report_with_a_link_to_the_run():
    report = {"runs": [
        {"run": "job7/rank_3", "steps": {"first": 1, "last": 800}, "findings": [
            {"kind": "nonfinite", "severity": "critical", "step": 420, "tag": "train/loss", "message": "NaN."},
            {"kind": "nonfinite", "severity": "critical", "step": 420, "tag": "train/grad_norm", "message": "NaN.",
             "evidence": {"part_of": "nonfinite"}},
            {"kind": "lr_schedule", "severity": "info", "step": 1, "tag": "train/lr", "message": "warm-up."}]},
    ]}
    (only,) = alerts_from_report(report, "http://host:6006/")
    assert (only.job, only.rank, only.kind, only.step, only.last_step) == ("job7", 3, "nonfinite", 420, 800)
    assert only.link == "http://host:6006/#health&run=job7%2Frank_3"
    assert urllib.parse.unquote(only.link.split("run=")[1]) == "job7/rank_3"


def test_secrets_come_from_the_environment_or_a_file(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("SECfromfile\n")
    (sink,) = sinks_from_config(["dingtalk"], {"TB_HEALTH_DINGTALK_URL": "https://x/robot/send?access_token=T0KEN",
                                               "TB_HEALTH_DINGTALK_SECRET_FILE": str(secret_file)})
    assert sink.secret == "SECfromfile" and "T0KEN" not in repr(sink) and "SEC" not in repr(sink)
    config = tmp_path / "notify.toml"
    config.write_text('[feishu]\nurl = "https://open.feishu.cn/open-apis/bot/v2/hook/abc"\nsecret = "s"\n')
    (feishu,) = sinks_from_config([], {}, str(config))
    assert feishu.kind == "feishu" and feishu.secret == "s"
    with pytest.raises(ConfigError, match="TB_HEALTH_WECOM_URL"):
        sinks_from_config(["wecom"], {})


def test_email_goes_through_a_real_smtp_server():
    aiosmtpd_controller = pytest.importorskip("aiosmtpd.controller")
    from aiosmtpd.handlers import Message as MessageHandler

    received = []

    class Collect(MessageHandler):
        def handle_message(self, email):
            received.append(email)

    port = free_port()
    controller = aiosmtpd_controller.Controller(Collect(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        (sink,) = sinks_from_config(["email"], {"TB_HEALTH_SMTP_HOST": "127.0.0.1", "TB_HEALTH_SMTP_PORT": str(port),
                                                "TB_HEALTH_SMTP_FROM": "tb@example.org",
                                                "TB_HEALTH_SMTP_TO": "a@example.org, b@example.org"})
        deliver(sink, message())
    finally:
        controller.stop()
    (email,) = received
    assert email["Subject"].startswith("[CRITICAL] divergence") and email["To"] == "a@example.org, b@example.org"
    assert "step 500" in email.get_payload()


def test_watch_analyses_again_only_when_something_was_logged(tmp_path, monkeypatch):
    import numpy as np

    from tb_health_plugin.analysis import engine
    from tb_health_plugin.commands.watch import Watcher
    from tests.eventlogs import write_scalars

    steps = np.arange(200)
    write_scalars(tmp_path / "a", {"train/loss": (steps, 2.0 / (1 + steps / 30.0))})
    calls = []
    original = engine.analyze_runs
    monkeypatch.setattr(engine, "analyze_runs", lambda *a, **k: calls.append(1) or original(*a, **k))
    watcher = Watcher(str(tmp_path), {}, None, "warning")
    watcher.alerts()
    watcher.alerts()  # nothing new: no analysis
    assert len(calls) == 1
    write_scalars(tmp_path / "b", {"train/loss": (steps, 2.0 / (1 + steps / 30.0))})
    watcher.alerts()
    assert len(calls) == 2
