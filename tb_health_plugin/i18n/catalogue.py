"""The message catalogues: `locale/<lang>.po`, read with Babel at run time.

Message ids are symbolic (`gradients.global.exploding`), the translations are Python
`str.format` templates (`{growth_factor:.3g}`) filled from an event's evidence and arguments.
English is a catalogue like the others, so every language is one file; a message missing from
a language falls back to English (the test `test_catalogue.py` keeps both complete).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.messages.pofile import read_po

LOCALE_DIR = Path(__file__).with_name("locale")
LANGUAGES = ("en", "zh")  # English first: the fallback
LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG")  # POSIX precedence for messages


@cache
def messages(lang: str) -> dict[str, str]:
    """id -> template of one language (translated entries only)."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGUAGES)}")
    with open(LOCALE_DIR / f"{lang}.po", "rb") as handle:
        catalog = read_po(handle, locale=lang)
    return {m.id: m.string for m in catalog if m.id and isinstance(m.string, str) and m.string}


def template(message_id: str, lang: str) -> str:
    """The template of `message_id` in `lang`, else in English; KeyError when neither has it."""
    found = messages(lang).get(message_id)
    if found is None:
        found = messages(LANGUAGES[0])[message_id]
    return found


def text(message_id: str, lang: str, **fields: object) -> str:
    """The template of `message_id` in `lang` filled from `fields` (`str.format`)."""
    return template(message_id, lang).format(**fields)


def parse_language(value: str | None) -> str | None:
    """`zh`, `zh_CN.UTF-8`, `zh-Hans`, `en_US` -> a language we have, or None."""
    if not value:
        return None
    value = value.split(".")[0].split("@")[0].replace("-", "_")
    if value in ("C", "POSIX"):
        return LANGUAGES[0]
    try:
        language = Locale.parse(value).language
    except (ValueError, UnknownLocaleError):
        return None
    return language if language in LANGUAGES else None


def default_language(environ: dict[str, str] | None = None) -> str:
    """The language of the user's locale: the first of LC_ALL, LC_MESSAGES, LANG that is set
    decides (as for any POSIX program); English when it names a language we do not have."""
    environ = os.environ if environ is None else environ
    for name in LOCALE_VARIABLES:
        value = environ.get(name)
        if value:
            return parse_language(value) or LANGUAGES[0]
    return LANGUAGES[0]
