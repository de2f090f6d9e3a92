"""What the CLI prints besides its report: control characters escaped, one line per problem.

Run names, tags and paths come from the logs, so anyone who can name a folder under a logdir
chooses them. Written raw, an ANSI escape sequence or a newline in a run name could recolour
the terminal or forge a whole `HEALTHY` line; `printable` escapes them. The readers report a
file or folder they cannot read as a logging warning with its traceback (for the TensorBoard
server's log); `read_problems` turns each into one line on stderr, written in the user's
language from the catalogue (`READER_LINES`: the readers' log messages and their `reader.*`
ids), and counts them, so the exit code can say that the report does not cover everything.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import unicodedata
from collections.abc import Iterator

from tb_health_plugin.i18n import text

READERS_LOGGER = "tb_health_plugin.readers"
# The readers' warnings (their log format) -> the catalogue id and the names of their arguments.
# A warning not listed here (an error's own text) is shown as logged.
READER_LINES = {
    "tb-health: skipping unreadable folder %s (%s)": ("reader.unreadable_folder", ("path", "reason")),
    "tb-health: skipping unreadable event file %s": ("reader.unreadable_file", ("path",)),
    "tb-health: skipping a record the decoder could not handle": ("reader.undecodable_record", ()),
    "tb-health: %s: record at byte %d claims %d bytes; skipped %d bytes to the next valid record": (
        "reader.lying_record", ("path", "offset", "claimed", "skipped")),
}
# Unicode format characters that reorder the text around them (U+202E makes "rtl\u202egnp.exe"
# read "rtlexe.png"): escaped like control characters.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """`text` with control characters (C0, DEL, C1, line and paragraph separators) and bidi
    controls written as Python escapes (`\\x1b`, `\\n`, `\\u202e`); the rest untouched."""
    if text.isprintable() and not BIDI_CONTROLS.intersection(text):
        return text  # the common case: nothing to escape
    return "".join(_escape(char) for char in text)


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    if char in BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Zl", "Zp"):
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def say(prog: str, message: str) -> None:
    """One escaped line on stderr; a closed stderr is ignored (nowhere left to tell)."""
    try:
        print(f"{prog}: {printable(message)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def reader_line(record: logging.LogRecord, lang: str) -> str:
    """A reader's warning in `lang` (as logged, without the `tb-health: ` prefix, when unknown)."""
    known = READER_LINES.get(record.msg) if isinstance(record.msg, str) else None
    args = record.args if isinstance(record.args, tuple) else ()
    if known is None or len(args) != len(known[1]):
        return record.getMessage().removeprefix("tb-health: ")
    message_id, names = known
    return text(message_id, lang, **dict(zip(names, args, strict=True)))


class _OneLine(logging.Handler):
    """Each reader warning as `prog: message (reason)` on stderr, without the traceback."""

    def __init__(self, prog: str, lang: str = "en") -> None:
        super().__init__(logging.WARNING)
        self.prog, self.lang = prog, lang
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        message = reader_line(record, self.lang)
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            reason = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            message = f"{message} ({reason})"
        say(self.prog, message)


@contextlib.contextmanager
def read_problems(prog: str, lang: str = "en") -> Iterator[_OneLine]:
    """Within the block, reader warnings go to stderr as one line each in `lang`; `.count` says how many."""
    readers = logging.getLogger(READERS_LOGGER)
    handler = _OneLine(prog, lang)
    saved_propagate, saved_level = readers.propagate, readers.level
    readers.addHandler(handler)
    readers.propagate = False
    if readers.getEffectiveLevel() > logging.WARNING:
        readers.setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        readers.removeHandler(handler)
        readers.propagate = saved_propagate
        readers.setLevel(saved_level)
