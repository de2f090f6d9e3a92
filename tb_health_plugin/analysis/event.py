"""The one thing detectors and checks return: an `Event`, numbers and codes only, no prose.

An event says what was found (`kind`, `severity`), where (`step`..`end_step`, `tag`) and on
what figures (`evidence`, which goes into the report as is). Its text is not written here:
`message` and `advice` are ids in the message catalogue (`tb_health_plugin/i18n/locale/*.po`),
and `args` holds the few extra figures or codes the text shows but the evidence does not.
`analysis/render.py` writes an event in any of the catalogue's languages.

`Phrase` is an argument that is itself a catalogue id (a clause chosen by the numbers, such as
"and stays non-finite to the end" against "at 3 logged point(s)"); it is rendered with the
same arguments as the message it sits in. Detectors that take a `what` (the series they look
at) take a code of the catalogue's `series.<what>` (`loss`, `training_loss`, `loss_window_max`...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tb_health_plugin.contract import SEVERITY_RANK


@dataclass(frozen=True)
class Phrase:
    """A catalogue id used as a message argument."""

    id: str


@dataclass
class Event:
    kind: str
    severity: str
    step: int
    tag: str
    message: str  # catalogue id of the sentence(s) saying what was found
    evidence: dict[str, Any] = field(default_factory=dict)
    end_step: int | None = None
    args: dict[str, Any] = field(default_factory=dict)  # figures/codes/Phrases only the text uses
    advice: str | None = None  # catalogue id of what to do, when the kind knows it

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class Clauses:
    """A list as a message argument: one clause of catalogue id `id` for each item (filled from
    the item's own fields), joined by the catalogue's `<id>.separator`."""

    id: str
    items: tuple[dict[str, Any], ...]


NOTHING = Phrase("")  # an optional clause left out: renders as the empty string in every language
