"""Where event files are read from: the local file system, or object storage through fsspec.

A logdir is a local path (read with `os`, FIFO- and symlink-safe, as `discovery` and
`logdir_reader` always did) or a URL such as `s3://bucket/prefix`, which TensorBoard also accepts.
A URL is read through fsspec (s3fs for S3 and S3-compatible stores such as Huawei OBS; any other
installed fsspec protocol works the same way):

- one refresh is one recursive listing of the prefix (`find`: for S3 a flat, paginated
  ListObjectsV2), which gives every object's size, so an unchanged file costs no request;
- a grown file is read from the offset already consumed with ranged GETs (`cat_file(start, end)`),
  so only new bytes travel. Object stores cannot append: a writer or a sync tool uploads the
  whole object again, and its bytes before the offset are the same as those read before;
- credentials and endpoints come from where the client library looks (for S3: the AWS environment
  variables, `~/.aws/credentials` and `~/.aws/config`, `AWS_ENDPOINT_URL`); TensorBoard's
  `S3_ENDPOINT` (with `S3_USE_HTTPS`, `S3_VERIFY_SSL`) is honoured too when `AWS_ENDPOINT_URL`
  is not set, so one set of variables serves TensorBoard and the Health tab.

Every failure of the store (wrong credentials, missing bucket, throttling, a dropped connection)
becomes a `StorageError` whose message says what happened and what to check; the caller keeps
what it read before and tries again later (`Backoff`). The client library retries each request a
few times first (`REQUEST_ATTEMPTS`).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import re
import stat
from collections.abc import Iterable
from typing import Protocol

logger = logging.getLogger(__name__)

REQUEST_ATTEMPTS = 3  # per request, by the client library: rides out a blip, not an outage (that is `Backoff`'s)
PREFETCH_CONCURRENCY = 16  # ranged GETs in flight at once when many files grew: fast, and gentle on a store's rate limits
PREFETCH_MAX_BYTES = 64 << 20  # most bytes fetched ahead in one refresh (held until their file is read)
BACKOFF_FIRST_S = 2.0  # first wait after a failed refresh: TensorBoard's own reload interval is 5 s
BACKOFF_MAX_S = 60.0  # longest wait: a store back after an outage shows within a minute
_THROTTLED = ("SlowDown", "ServiceUnavailable", "Throttl", "TooManyRequests", "reduce your request rate")
_AUTH = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken",
         "Forbidden", "credentials")


def _http_status(code: int) -> re.Pattern:
    """An HTTP status standing alone in an error's text ("An error occurred (403) ...", "403
    Forbidden", "status=503"), not digits of a port, a path or a file name: a fault proxy on port
    40359 made a dropped connection read as "access denied", the URL in its message holding 403."""
    return re.compile(rf"(?<![\w.:/-]){code}(?!\w|\.\d)")


_AUTH_STATUS = _http_status(403)
_THROTTLED_STATUS = _http_status(503)


class StorageError(OSError):
    """The store could not be read; `str()` is a message for people (the tab and the CLI)."""


def is_url(logdir: str) -> bool:
    """True for `protocol://...` (but not `file://`), which fsspec reads."""
    protocol, sep, _ = logdir.partition("://")
    return bool(sep) and protocol.isidentifier() and protocol != "file"


class Storage(Protocol):
    """What the readers need from where the files are."""

    fetches_ahead: bool  # whether `prefetch` is worth calling

    def listing(self, logdir: str) -> Iterable[tuple[str, list[str], list[str]]]:
        """(folder, subfolders, file names) for every folder under `logdir`, top-down."""

    def is_regular(self, path: str) -> bool:
        """False for something that must never be opened (a FIFO, a device)."""

    def size(self, path: str) -> tuple[int, object]:
        """(size in bytes, identity: a file replaced by another has a new one); (-1, None) if unknown."""

    def open(self, path: str):
        """A binary file object (`seek`, `read`) of the file, and its (size, identity)."""

    def prefetch(self, ranges: list[tuple[str, int, int]]) -> None:
        """Hint: these (path, start, end) byte ranges will be read next (fetched together where
        that saves round trips)."""

    def join(self, folder: str, name: str) -> str: ...

    def relative(self, logdir: str, folder: str) -> str: ...

    def basename(self, path: str) -> str: ...


class LocalStorage:
    """The local file system, read the fast way: `os.scandir`, `os.stat`, plain file reads."""

    fetches_ahead = False  # reads one by one are fast

    def listing(self, logdir: str):
        return walk_folders(logdir, onerror=unreadable_folder)

    def is_regular(self, path: str) -> bool:
        """Through symlinks, never opening it (a FIFO would block); a file that cannot be looked
        at counts as regular: reading it fails and is counted."""
        try:
            return stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            return True

    def size(self, path: str) -> tuple[int, object]:
        try:
            info = os.stat(path)
        except OSError:
            return -1, None
        return info.st_size, (info.st_dev, info.st_ino)

    def prefetch(self, ranges: list[tuple[str, int, int]]) -> None:
        return None  # local reads are fast one by one

    def open(self, path: str):
        handle = open_regular_file(path)
        info = os.fstat(handle.fileno())
        return handle, (info.st_size, (info.st_dev, info.st_ino))

    join = staticmethod(os.path.join)
    basename = staticmethod(os.path.basename)

    @staticmethod
    def relative(logdir: str, folder: str) -> str:
        relative = os.path.relpath(folder, logdir)
        return "." if relative == "." else relative.replace(os.sep, "/")


class NotARegularFile(OSError):
    pass


def open_regular_file(path: str):
    """Open for reading without ever blocking: a FIFO swapped in after discovery would wait for
    a writer on a plain open, so the open does not wait, and anything but a regular file is refused."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotARegularFile(f"not a regular file: {path}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)  # regular files never block; keep reads plain
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


class RemoteStorage:
    """A URL read through fsspec. Paths handed out are full URLs (`s3://bucket/run/file`).

    Sizes come from the last listing: between two listings a file is read up to the size listed,
    never past it, so a refresh costs one listing plus one ranged GET per grown file (per
    `READ_CHUNK_BYTES` of new data).
    """

    fetches_ahead = True  # a round trip per read: worth sending many at once

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.protocol = self.url.partition("://")[0]
        self._fs = None
        self._sizes: dict[str, int] = {}
        self._prefetched: dict[str, tuple[int, bytes]] = {}  # path -> (start, bytes) fetched ahead
        self.requests = 0  # listings and reads sent (each may be retried by the client library)
        self.bytes_read = 0

    @property
    def fs(self):
        """The fsspec file system, made on first use; `StorageError` saying what to install when
        the protocol's package is missing or the protocol is unknown."""
        if self._fs is None:
            try:
                import fsspec

                fs = fsspec.filesystem(self.protocol, **filesystem_options(self.protocol))
            except (ImportError, ValueError) as error:
                hint = " (pip install 'tb-health-plugin[s3]')" if self.protocol in ("s3", "s3a") else ""
                raise StorageError(f"{self.url}: cannot read {self.protocol}:// URLs: {error}{hint}") from error
            if hasattr(fs, "retries"):
                fs.retries = REQUEST_ATTEMPTS  # s3fs's own retries (of throttling), around the client's
            self._fs = fs
        return self._fs

    def _url(self, path: str) -> str:
        return f"{self.protocol}://{path}"

    def listing(self, logdir: str):
        """One recursive listing of the prefix, grouped into folders (top-down)."""
        fs = self.fs
        root = fs._strip_protocol(logdir.rstrip("/"))
        fs.invalidate_cache()
        self.requests += 1
        try:
            found = fs.find(root, detail=True)
        except FileNotFoundError as error:
            raise StorageError(describe(error, logdir)) from error
        except Exception as error:  # noqa: BLE001 - every client failure becomes a message
            raise StorageError(describe(error, logdir)) from error
        folders: dict[str, list[str]] = {}
        sizes: dict[str, int] = {}
        for path, info in found.items():
            if info.get("type", "file") != "file":
                continue
            parent, name = posixpath.split(path)
            folders.setdefault(parent, []).append(name)
            sizes[self._url(path)] = int(info.get("size") or 0)
        self._sizes = sizes
        subfolders: dict[str, set[str]] = {}
        for folder in folders:
            while folder != root and folder.startswith(root + "/"):
                parent, name = posixpath.split(folder)
                subfolders.setdefault(parent, set()).add(name)
                folder = parent
        for folder in sorted(set(folders) | set(subfolders)):
            yield self._url(folder), sorted(subfolders.get(folder, ())), sorted(folders.get(folder, ()))

    def is_regular(self, path: str) -> bool:
        return True  # objects are bytes: nothing to block on

    def size(self, path: str) -> tuple[int, object]:
        return self._sizes.get(path, -1), None

    def open(self, path: str):
        size = self._sizes.get(path, -1)
        return RangedFile(self, path, size), (size, None)

    def prefetch(self, ranges: list[tuple[str, int, int]]) -> None:
        """Fetch many files' new bytes at once (`PREFETCH_CONCURRENCY` in flight), up to
        `PREFETCH_MAX_BYTES`: the same ranged GETs as reading them one by one, without waiting for
        each in turn. A range that failed is simply read again, one by one, when its file is read."""
        self._prefetched.clear()
        chosen, total = [], 0
        for path, start, end in ranges:
            if end > start and total + (end - start) <= PREFETCH_MAX_BYTES:
                chosen.append((path, start, end))
                total += end - start
        if len(chosen) < 2:
            return
        self.requests += len(chosen)
        try:
            results = self.fs.cat_ranges([p for p, _, _ in chosen], [s for _, s, _ in chosen],
                                         [e for _, _, e in chosen], batch_size=PREFETCH_CONCURRENCY, on_error="return")
        except Exception:  # noqa: BLE001 - only a hint: the reads one by one say what fails
            logger.debug("tb-health: prefetch failed", exc_info=True)
            return
        for (path, start, _end), data in zip(chosen, results, strict=True):
            if isinstance(data, bytes):
                self._prefetched[path] = (start, data)
                self.bytes_read += len(data)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        fetched = self._prefetched.pop(path, None)
        if fetched is not None and fetched[0] == start and end - start <= len(fetched[1]):
            return fetched[1][: end - start]
        self.requests += 1
        try:
            data = self.fs.cat_file(path, start=start, end=end)
        except FileNotFoundError:
            raise  # deleted since the listing: the next listing drops it
        except Exception as error:  # noqa: BLE001 - every client failure becomes a message
            raise StorageError(describe(error, path)) from error
        self.bytes_read += len(data)
        return data

    @staticmethod
    def join(folder: str, name: str) -> str:
        return f"{folder}/{name}"

    basename = staticmethod(posixpath.basename)

    @staticmethod
    def relative(logdir: str, folder: str) -> str:
        logdir = logdir.rstrip("/")
        return "." if folder == logdir else folder[len(logdir) + 1 :]


class RangedFile:
    """`seek`/`read` over an object, one ranged GET per `read`, never past the listed size."""

    def __init__(self, storage: RemoteStorage, path: str, size: int) -> None:
        self.storage, self.path, self.size, self.position = storage, path, size, 0

    def seek(self, offset: int) -> None:
        self.position = offset

    def read(self, count: int) -> bytes:
        end = min(self.position + count, self.size)
        if end <= self.position:
            return b""
        data = self.storage.read_range(self.path, self.position, end)
        self.position += len(data)
        return data

    def __enter__(self) -> RangedFile:
        return self

    def __exit__(self, *exc) -> None:
        return None


def storage_for(logdir: str) -> Storage:
    return RemoteStorage(logdir) if is_url(logdir) else LocalStorage()


def filesystem_options(protocol: str) -> dict:
    """fsspec options for a protocol: for S3, TensorBoard's endpoint variables and bounded retries."""
    if protocol not in ("s3", "s3a"):
        return {"skip_instance_cache": True}
    # A fresh client per reader: fsspec's instance cache would keep the credentials of the first one.
    options: dict = {"skip_instance_cache": True,
                     "config_kwargs": {"retries": {"max_attempts": REQUEST_ATTEMPTS, "mode": "standard"}}}
    endpoint = tensorboard_s3_endpoint()
    if endpoint and not os.environ.get("AWS_ENDPOINT_URL") and not os.environ.get("AWS_ENDPOINT_URL_S3"):
        options["endpoint_url"] = endpoint
        if os.environ.get("S3_VERIFY_SSL", "1") == "0":
            options["client_kwargs"] = {"verify": False}
    return options


def tensorboard_s3_endpoint() -> str | None:
    """`S3_ENDPOINT` as TensorBoard passes it to boto3; a bare `host:port` (TensorFlow's spelling)
    gets `https://`, or `http://` with `S3_USE_HTTPS=0`."""
    endpoint = os.environ.get("S3_ENDPOINT", "").strip()
    if not endpoint:
        return None
    if "://" not in endpoint:
        scheme = "http" if os.environ.get("S3_USE_HTTPS", "1") == "0" else "https"
        endpoint = f"{scheme}://{endpoint}"
    return endpoint


def describe(error: BaseException, where: str) -> str:
    """A message for people: what went wrong reading `where`, and what to check."""
    text = _error_text(error)
    if isinstance(error, PermissionError) or any(word in text for word in _AUTH) or _AUTH_STATUS.search(text):
        return (f"{where}: access denied ({_reason(error)}); check the credentials "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials) and the endpoint")
    if isinstance(error, FileNotFoundError) or "NoSuchBucket" in text:
        return f"{where}: no such bucket ({_reason(error)}); check the bucket name and the endpoint"
    if (getattr(error, "errno", None) == errno.EBUSY or any(word in text for word in _THROTTLED)
            or _THROTTLED_STATUS.search(text)):
        return f"{where}: the store is throttling requests ({_reason(error)})"
    if any(word in text for word in ("connect", "Connect", "Connection", "reset", "closed", "Timeout", "timed out")):
        return f"{where}: connection to the store failed ({_reason(error)}); check the endpoint and the network"
    return f"{where}: {type(error).__name__}: {_reason(error)}"


def _error_text(error: BaseException) -> str:
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return " | ".join(parts)


def _reason(error: BaseException) -> str:
    """What the server or the client said, on one line (`[Errno 16]` and the like left out)."""
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return (text.splitlines() or [""])[0][:300]


class Backoff:
    """Waits between attempts after failures: `BACKOFF_FIRST_S`, doubling up to `BACKOFF_MAX_S`;
    the normal interval again after a success."""

    def __init__(self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.failures = 0

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self) -> None:
        self.failures += 1

    def wait_s(self, normal_s: float) -> float:
        """Seconds until the next attempt, for a caller that refreshes every `normal_s`."""
        if not self.failures:
            return normal_s
        return min(self.max_s, max(normal_s, self.first_s * 2 ** (self.failures - 1)))


# ----- the local file system's listing
_warned_folders: set[str] = set()  # warned once each: a live reader walks again and again


def walk_folders(top: str, onerror=None):
    """Like `os.walk(top, onerror=...)` (top-down, symlinked folders not entered): (folder,
    subfolders, others).

    Iterative (a tree deeper than Python's recursion limit is walked like any other); folders
    that cannot be listed are passed over (given to `onerror` first), symlinked folders are not
    entered.
    """
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as error:
            if onerror is not None:
                onerror(error)
            continue
        names, subfolders = [], []
        for entry in entries:
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            (subfolders if is_folder else names).append(entry.name)
        yield folder, subfolders, names
        stack.extend(os.path.join(folder, name) for name in sorted(subfolders, reverse=True))


def unreadable_folder(error: OSError) -> None:
    """A folder os.walk cannot list: warned once per folder (a live reader walks again and again).
    A folder gone (or a logdir not made yet) is not unreadable."""
    if not isinstance(error, FileNotFoundError) and error.filename not in _warned_folders:
        _warned_folders.add(error.filename)
        logger.warning("tb-health: skipping unreadable folder %s (%s)", error.filename, error.strerror or error)
