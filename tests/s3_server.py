"""A real S3-protocol server for tests and benchmarks: moto's server mode on a free loopback port,
optionally behind a small HTTP proxy that counts requests and bytes and injects failures
(503 SlowDown, a dropped connection) the way a store or a network does.

Clients are real (s3fs, boto3, TensorBoard's own S3 reader): nothing of theirs is mocked.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.tensorboard_server import free_port

ACCESS_KEY, SECRET_KEY, REGION = "testing-key", "testing-secret", "us-east-1"
SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                 b"<Message>Please reduce your request rate.</Message></Error>")


@dataclass
class Request:
    method: str
    path: str  # with the query string
    range: str | None
    status: int
    body_bytes: int  # bytes of the response body sent to the client


@dataclass
class FaultProxy:
    """Forwards every request to `upstream` (host, port); records each in `requests`.

    `fault` is None (pass through), "slowdown" (answer 503 SlowDown) or "drop" (close the
    connection without an answer); `fault_budget` is how many requests get it (None: all)."""

    upstream: tuple[str, int]
    requests: list[Request] = field(default_factory=list)
    fault: str | None = None
    fault_budget: int | None = None
    faults_served: int = 0
    skip: int = 0  # requests passed through before the fault starts
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def inject(self, fault: str | None, count: int | None = None, skip: int = 0) -> None:
        with self.lock:
            self.fault, self.fault_budget, self.faults_served, self.skip = fault, count, 0, skip

    def take_fault(self) -> str | None:
        with self.lock:
            if self.fault is None or (self.fault_budget is not None and self.faults_served >= self.fault_budget):
                return None
            if self.skip:
                self.skip -= 1
                return None
            self.faults_served += 1
            return self.fault

    def reset_counts(self) -> None:
        with self.lock:
            self.requests.clear()

    def record(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _handler(proxy: FaultProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = proxy.take_fault()
            if fault == "drop":
                proxy.record(Request(self.command, self.path, self.headers.get("Range"), 0, 0))
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(2)
                return
            if fault == "slowdown":
                # recorded before answering: a client that has its answer finds its request counted
                proxy.record(Request(self.command, self.path, self.headers.get("Range"), 503, len(SLOWDOWN_BODY)))
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(SLOWDOWN_BODY)))
                self.end_headers()
                self.wfile.write(SLOWDOWN_BODY)
                return
            upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                headers = {key: value for key, value in self.headers.items() if key.lower() != "connection"}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
            finally:
                upstream.close()
            proxy.record(Request(self.command, self.path, self.headers.get("Range"), response.status,
                                 0 if self.command == "HEAD" else len(data)))
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    self.send_header(key, value)
            # A HEAD answer has no body but says the object's length, as the server said it.
            length = response.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    return Handler


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Yield the endpoint URL of a moto S3 server on a free loopback port; stop it afterwards."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def fault_proxy(endpoint: str) -> Iterator[FaultProxy]:
    host, _, port = endpoint.rpartition("://")[2].partition(":")
    proxy = FaultProxy(upstream=(host, int(port)))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="s3-fault-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()


def client_env(endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> dict[str, str]:
    """Environment for a process reading the server: AWS variables and TensorBoard's S3_ENDPOINT.
    Config files are pointed away so that a developer's ~/.aws cannot interfere."""
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "S3_ENDPOINT": endpoint,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the current process, and restore them afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name=REGION)


def upload_tree(client, bucket: str, local_root, prefix: str = "") -> int:
    """Upload every file under `local_root` to `bucket/prefix/...`; the number of objects."""
    count = 0
    for folder, _, names in os.walk(local_root):
        for name in names:
            path = os.path.join(folder, name)
            key = os.path.relpath(path, local_root).replace(os.sep, "/")
            with open(path, "rb") as handle:
                client.put_object(Bucket=bucket, Key=f"{prefix}/{key}" if prefix else key, Body=handle.read())
            count += 1
    return count
