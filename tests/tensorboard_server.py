"""Start a real `tensorboard` process on a free loopback port for a test, and always stop it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

START_TIMEOUT_S = 90  # TensorBoard imports slowly on a busy 2-core machine


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tensorboard_command() -> list[str]:
    exe = Path(sys.executable).with_name("tensorboard")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tensorboard")
    if found:
        return [found]
    return [sys.executable, "-m", "tensorboard.main"]


def get_json(url: str, timeout: float = 30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


@contextlib.contextmanager
def running_tensorboard(
    logdir,
    load_fast: bool = False,
    reload_interval_s: int = 1,
    command: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[str]:
    """Yield the base URL (`http://127.0.0.1:PORT`) of a TensorBoard serving `logdir`.

    `command`, `env` and `cwd` run another installation's `tensorboard` (a fresh virtual
    environment) instead of this interpreter's."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tensorboard-", suffix=".log", delete=False)
    command = (command or tensorboard_command()) + [
        "--logdir", str(logdir),
        "--host", "127.0.0.1",
        "--port", str(port),
        f"--load_fast={'true' if load_fast else 'false'}",
        "--reload_interval", str(reload_interval_s),
    ]
    env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tensorboard exited early:\n{Path(log.name).read_text()[-3000:]}")
            try:
                get_json(base + "/data/plugins_listing", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tensorboard did not answer:\n{Path(log.name).read_text()[-3000:]}") from None
                time.sleep(0.3)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
        os.unlink(log.name)
