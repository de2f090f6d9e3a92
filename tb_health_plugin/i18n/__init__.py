"""Every sentence a user reads about a finding, in English and Chinese, from one catalogue.

Detectors and checks return `analysis.event.Event`s (numbers and codes); this package is the
one layer that writes prose. The text lives in gettext catalogues, `locale/<lang>.po`, the
source of truth (translators edit them with any PO tool); they are read at run time with Babel
(`catalogue.py`), so nothing is compiled in the build. `render.py` turns an event, its likely
cause and its evidence into the report's finding in one language.
"""

from tb_health_plugin.i18n.catalogue import LANGUAGES, default_language, parse_language
from tb_health_plugin.i18n.render import kind_labels, render_finding, render_run_report

__all__ = [
    "LANGUAGES",
    "default_language",
    "parse_language",
    "kind_labels",
    "render_finding",
    "render_run_report",
]
