"""Every sentence a user reads about a finding, in English and Chinese, from one catalogue.

Detectors and checks return `analysis.event.Event`s (numbers and codes); `analysis/render.py` is
the one layer that writes prose, from this package's catalogues. The text lives in gettext
catalogues, `locale/<lang>.po`, the source of truth (translators edit them with any PO tool);
they are read at run time with Babel (`catalogue.py`), so nothing is compiled in the build.
This package depends on nothing of the project, so every layer may ask it for a language.
"""

from tb_health_plugin.i18n.catalogue import LANGUAGES, default_language, parse_language, text

__all__ = [
    "LANGUAGES",
    "default_language",
    "parse_language",
    "text",
]
