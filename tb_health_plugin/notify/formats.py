"""Each chat service's message body and signature, as pure functions of the text to send.

The bodies follow each service's documented custom-robot / incoming-webhook format:

* DingTalk custom robot: `{"msgtype": "markdown", "markdown": {"title", "text"}}`; with a
  signing secret the URL gets `timestamp` (ms) and `sign` = urlencode(base64(HMAC-SHA256(
  key=secret, msg=f"{timestamp}\\n{secret}"))).
* Feishu / Lark custom bot: `{"msg_type": "post", "content": {"post": {lang: {"title",
  "content": [[{"tag": "text"|"a", ...}]]}}}}`; with a secret the body gets `timestamp` (s)
  and `sign` = base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b"")).
* WeCom (企业微信) group robot: `{"msgtype": "markdown", "markdown": {"content"}}`, at most
  4096 bytes of content.
* Slack incoming webhook: `{"text", "blocks": [{"type": "section", "text": {"type": "mrkdwn"}}]}`.
* Generic webhook: our own JSON, `{"source": "tb-health", "title", "text", "alerts": [...]}`,
  for anything that takes JSON (Alertmanager-style receivers, scripts).

A `Message` is what every sink renders: a title, lines of text, an optional link, and the
alerts it carries (the generic webhook sends them as data).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

WECOM_MAX_BYTES = 4096  # WeCom rejects markdown content longer than this


@dataclass(frozen=True)
class Message:
    title: str
    lines: tuple[str, ...]
    link: str | None = None
    link_text: str = "Open in the Health tab"
    alerts: tuple[dict[str, Any], ...] = field(default=())  # the alerts as JSON, for webhooks

    def plain(self) -> str:
        body = "\n".join(self.lines)
        return f"{self.title}\n{body}" + (f"\n{self.link}" if self.link else "")


def _markdown(message: Message) -> str:
    lines = [f"### {message.title}", *(f"- {line}" for line in message.lines)]
    if message.link:
        lines.append(f"[{message.link_text}]({message.link})")
    return "\n".join(lines)


def dingtalk_body(message: Message) -> dict[str, Any]:
    return {"msgtype": "markdown", "markdown": {"title": message.title, "text": _markdown(message)}}


def dingtalk_signed_url(url: str, secret: str, timestamp_ms: int) -> str:
    to_sign = f"{timestamp_ms}\n{secret}".encode()
    digest = hmac.new(secret.encode(), to_sign, hashlib.sha256).digest()
    sign = urllib.parse.quote_plus(base64.b64encode(digest))
    separator = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{separator}timestamp={timestamp_ms}&sign={sign}"


def feishu_body(message: Message, secret: str | None = None, timestamp_s: int | None = None,
                lang: str = "en") -> dict[str, Any]:
    rows: list[list[dict[str, str]]] = [[{"tag": "text", "text": line}] for line in message.lines]
    if message.link:
        rows.append([{"tag": "a", "text": message.link_text, "href": message.link}])
    locale = "zh_cn" if lang == "zh" else "en_us"
    body: dict[str, Any] = {
        "msg_type": "post",
        "content": {"post": {locale: {"title": message.title, "content": rows}}},
    }
    if secret:
        if timestamp_s is None:
            raise ValueError("a signed Feishu message needs its timestamp")
        body["timestamp"] = str(timestamp_s)
        body["sign"] = feishu_sign(secret, timestamp_s)
    return body


def feishu_sign(secret: str, timestamp_s: int) -> str:
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def wecom_body(message: Message) -> dict[str, Any]:
    text = _markdown(message)
    encoded = text.encode()
    if len(encoded) > WECOM_MAX_BYTES:
        text = encoded[: WECOM_MAX_BYTES - 3].decode(errors="ignore") + "..."
    return {"msgtype": "markdown", "markdown": {"content": text}}


def slack_body(message: Message) -> dict[str, Any]:
    lines = [f"*{_slack_escape(message.title)}*", *(f"• {_slack_escape(line)}" for line in message.lines)]
    if message.link:
        lines.append(f"<{message.link}|{_slack_escape(message.link_text)}>")
    text = "\n".join(lines)
    return {"text": message.plain(), "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


def _slack_escape(text: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_body(message: Message) -> dict[str, Any]:
    return {
        "source": "tb-health",
        "title": message.title,
        "text": "\n".join(message.lines),
        "link": message.link,
        "alerts": list(message.alerts),
    }
