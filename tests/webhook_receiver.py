"""A real HTTP server on a free loopback port that records the webhooks sent to it.

Each request is kept (path, query, headers, JSON body). The answers can be scripted: a list of
(HTTP status, body) pairs used in order, then `default`. `hold` (a threading.Event) makes each
request wait until it is set, to show that a sender does not wait for a slow server.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    answers: list[tuple[int, Any]] = field(default_factory=list)
    default: tuple[int, Any] = (200, {"errcode": 0, "errmsg": "ok"})
    hold: threading.Event | None = None
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 60.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, timeout)


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            parts = urllib.parse.urlsplit(self.path)
            if receiver.hold is not None:
                receiver.hold.wait(60)
            with receiver.arrived:
                receiver.requests.append(Received(parts.path, dict(urllib.parse.parse_qsl(parts.query)),
                                                  dict(self.headers), body))
                status, answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                receiver.arrived.notify_all()
            data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
