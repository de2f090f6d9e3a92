"""Where notifications go, configured from the environment or a file, never the command line.

A robot's URL carries its access token and a signing secret is a password: both would end up
in shell history, `ps` output and job logs if given as arguments, so a sink is named on the
command line (`--notify dingtalk`) and its URL and secret come from `TB_HEALTH_<SINK>_URL` and
`TB_HEALTH_<SINK>_SECRET` (or `..._FILE`, a path to read them from), or from a TOML file
(`--notify-config`) with one table per sink. E-mail reads `TB_HEALTH_SMTP_*`.

`deliver` sends one message and raises `DeliveryError`, marked retriable for what passes
(connection failures, time-outs, HTTP 429 and 5xx, the services' own "too many requests"
codes) and final otherwise (a wrong token, a bad signature, a missing robot). The services
answer HTTP 200 with an error code in the body, so the body is read too.
"""

from __future__ import annotations

import json
import os
import smtplib
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from tb_health_plugin.notify import formats

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from tb_health_plugin.notify.formats import Message

SINK_KINDS = ("webhook", "dingtalk", "feishu", "wecom", "slack", "email")
HTTP_TIMEOUT_S = 10.0

# Documented send limits per robot: (messages, per seconds). DingTalk and WeCom: 20 a minute;
# Feishu: 100 a minute (and 5 a second); Slack: about one a second. Ours for the others.
RATE_LIMITS: dict[str, tuple[int, float]] = {
    "dingtalk": (20, 60.0),
    "wecom": (20, 60.0),
    "feishu": (100, 60.0),
    "slack": (60, 60.0),
    "webhook": (60, 60.0),
    "email": (10, 60.0),
}
# Error codes in a 200 answer that mean "slow down" (retry later) rather than "wrong request".
THROTTLED_CODES = {
    "dingtalk": {130101},  # send too fast
    "wecom": {45009},  # api freq out of limit
    "feishu": {11232},  # frequency limited
}


class DeliveryError(Exception):
    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class ConfigError(ValueError):
    """A sink named without the settings it needs."""


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    sender: str
    recipients: tuple[str, ...]
    user: str | None = None
    password: str | None = None
    security: str = "none"  # none | starttls | ssl


@dataclass(frozen=True)
class Sink:
    kind: str
    url: str | None = None
    secret: str | None = None
    smtp: SmtpSettings | None = None

    def __repr__(self) -> str:  # never print a token or a secret
        return f"Sink({self.kind})"


def sinks_from_config(names: list[str], environ: Mapping[str, str] | None = None,
                      config_file: str | None = None) -> list[Sink]:
    """The sinks named, each with its settings from the config file or the environment."""
    environ = os.environ if environ is None else environ
    tables: dict[str, Any] = {}
    if config_file:
        with open(config_file, "rb") as handle:
            tables = tomllib.load(handle)
        names = list(dict.fromkeys([*names, *(k for k in tables if k in SINK_KINDS)]))
    sinks = []
    for name in names:
        if name not in SINK_KINDS:
            raise ConfigError(f"unknown notification sink {name!r}; sinks: {', '.join(SINK_KINDS)}")
        table = tables.get(name, {})
        if name == "email":
            sinks.append(Sink("email", smtp=_smtp_settings(table, environ)))
            continue
        url = table.get("url") or _secret_setting(environ, f"TB_HEALTH_{name.upper()}_URL")
        if not url:
            raise ConfigError(f"--notify {name}: set TB_HEALTH_{name.upper()}_URL (or _URL_FILE), "
                              f"or give a [{name}] url in --notify-config")
        secret = table.get("secret") or _secret_setting(environ, f"TB_HEALTH_{name.upper()}_SECRET")
        sinks.append(Sink(name, url=url, secret=secret or None))
    return sinks


def _secret_setting(environ: Mapping[str, str], name: str) -> str | None:
    if environ.get(name):
        return environ[name].strip()
    path = environ.get(f"{name}_FILE")
    if path:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return None


def _smtp_settings(table: Mapping[str, Any], environ: Mapping[str, str]) -> SmtpSettings:
    def setting(key: str, default: str | None = None) -> str | None:
        return table.get(key.lower()) or _secret_setting(environ, f"TB_HEALTH_SMTP_{key}") or default

    host, sender, recipients = setting("HOST"), setting("FROM"), setting("TO")
    if not (host and sender and recipients):
        raise ConfigError("--notify email: set TB_HEALTH_SMTP_HOST, TB_HEALTH_SMTP_FROM and TB_HEALTH_SMTP_TO "
                          "(and TB_HEALTH_SMTP_PORT/_USER/_PASSWORD/_SECURITY as needed)")
    user = setting("USER")
    security = setting("SECURITY", "starttls" if user else "none")
    if security not in ("none", "starttls", "ssl"):
        raise ConfigError(f"TB_HEALTH_SMTP_SECURITY must be none, starttls or ssl, got {security!r}")
    port = int(setting("PORT", "465" if security == "ssl" else ("587" if security == "starttls" else "25")))
    to = tuple(r.strip() for r in str(recipients).split(",") if r.strip())
    return SmtpSettings(host, port, sender, to, user, setting("PASSWORD"), security)


def deliver(sink: Sink, message: Message, lang: str = "en", now: float | None = None) -> None:
    """Send `message` to `sink` once; `DeliveryError` if it did not arrive."""
    now = time.time() if now is None else now
    if sink.kind == "email":
        _send_email(sink.smtp, message)
        return
    url = sink.url
    if sink.kind == "dingtalk":
        body = formats.dingtalk_body(message)
        if sink.secret:
            url = formats.dingtalk_signed_url(url, sink.secret, int(now * 1000))
    elif sink.kind == "feishu":
        body = formats.feishu_body(message, sink.secret, int(now), lang)
    elif sink.kind == "wecom":
        body = formats.wecom_body(message)
    elif sink.kind == "slack":
        body = formats.slack_body(message)
    else:
        body = formats.webhook_body(message)
    status, answer = _post_json(url, body)
    _check_answer(sink.kind, status, answer)


def _post_json(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    data = json.dumps(body, ensure_ascii=False).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json; charset=utf-8",
                                              "User-Agent": "tb-health"})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, response.read(65536)
    except urllib.error.HTTPError as error:
        return error.code, error.read(65536) if error.fp else b""
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DeliveryError(f"cannot reach the server: {reason}", retriable=True) from None


def _check_answer(kind: str, status: int, answer: bytes) -> None:
    if status == 429 or status >= 500:
        raise DeliveryError(f"HTTP {status}", retriable=True)
    if status >= 400:
        raise DeliveryError(f"HTTP {status}: {answer[:200].decode(errors='replace')}", retriable=False)
    if kind in ("dingtalk", "wecom", "feishu"):
        try:
            parsed = json.loads(answer or b"{}")
        except ValueError:
            raise DeliveryError(f"unexpected answer: {answer[:200]!r}", retriable=True) from None
        code = parsed.get("errcode", parsed.get("code", parsed.get("StatusCode", 0)))
        if code not in (0, None):
            text = parsed.get("errmsg") or parsed.get("msg") or parsed.get("StatusMessage") or ""
            raise DeliveryError(f"{kind} error {code}: {text}", retriable=code in THROTTLED_CODES.get(kind, ()))


def _send_email(settings: SmtpSettings, message: Message) -> None:
    email = EmailMessage()
    email["Subject"] = message.title
    email["From"] = settings.sender
    email["To"] = ", ".join(settings.recipients)
    email.set_content(message.plain())
    try:
        client_class = smtplib.SMTP_SSL if settings.security == "ssl" else smtplib.SMTP
        with client_class(settings.host, settings.port, timeout=HTTP_TIMEOUT_S) as client:
            if settings.security == "starttls":
                client.starttls()
            if settings.user:
                client.login(settings.user, settings.password or "")
            client.send_message(email)
    except smtplib.SMTPAuthenticationError as error:
        raise DeliveryError(f"SMTP login refused: {error.smtp_code}", retriable=False) from None
    except smtplib.SMTPRecipientsRefused:
        raise DeliveryError("SMTP server refused every recipient", retriable=False) from None
    except (smtplib.SMTPException, OSError) as error:
        raise DeliveryError(f"SMTP: {error}", retriable=True) from None
