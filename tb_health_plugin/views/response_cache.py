"""The last JSON body of a route, serialised (and gzipped) once while its payload stays the same.

The overview of a 10,000-run logdir is about 6 MB of JSON: serialising it takes 100-150 ms of
CPU and gzipping it for a browser as much again, on every poll of every open tab, although the
service hands out the very same overview object until a run's data or report changes. This
keeps, per key (the language), the body rendered from the last payload object and the extras
sent beside it (storage and reading status); a different object or different extras render anew.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Hashable
from typing import Any

from tensorboard.backend import http_util

GZIP_LEVEL = 3  # what TensorBoard's own `http_util.Respond` uses for textual responses
JSON = "application/json"


class _Body:
    def __init__(self, payload: Any, extras: Any, text: str) -> None:
        self.payload, self.extras = payload, extras
        self.raw = text.encode("utf-8")
        self._gzipped: bytes | None = None
        self._lock = threading.Lock()

    def gzipped(self) -> bytes:
        with self._lock:
            if self._gzipped is None:
                self._gzipped = gzip.compress(self.raw, compresslevel=GZIP_LEVEL, mtime=0)
            return self._gzipped


class ResponseCache:
    """`respond(request, key, payload, extras, render)`: `render()` (the body as text) runs only
    when `payload` is not the object of the last call for `key`, or `extras` differ."""

    def __init__(self) -> None:
        self._bodies: dict[Hashable, _Body] = {}
        self._lock = threading.Lock()
        self.renders = 0  # bodies rendered, not reused

    def respond(self, request, key: Hashable, payload: Any, extras: Any, render: Callable[[], str]):
        with self._lock:
            body = self._bodies.get(key)
        if body is None or body.payload is not payload or body.extras != extras:
            body = _Body(payload, extras, render())
            with self._lock:
                self._bodies[key] = body
                self.renders += 1
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return http_util.Respond(request, body.gzipped(), JSON, content_encoding="gzip")
        return http_util.Respond(request, body.raw, JSON)
