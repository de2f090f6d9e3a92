"""The registry of finding kinds: one module per kind, found by importing this package.

A kind's module (`analysis/kinds/<kind>.py`) declares everything about its kind in one
`register(Kind(...))`: the checks that find it, the catalogue ids of its messages and advice
(their text, in every language, is in `tb_health_plugin/i18n/locale/*.po`), the likely causes
`analysis.diagnosis` may give it and the function that picks one. The engine runs the checks of
the registered kinds and the tab learns their names from it; nothing else lists kinds, except
`contract.KINDS`, which a test keeps equal to the registry.

Adding a kind: write its detector (`analysis/detectors/`) and check (`analysis/checks/`), add
a module here, its name to `contract.KINDS`, and its messages to each `.po` file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tb_health_plugin.analysis.event import Event
from tb_health_plugin.analysis.signals import RunSignals
from tb_health_plugin.contract import CAUSES, KINDS

RunCheck = Callable[[RunSignals], list[Event]]
JobCheck = Callable[[dict[str, RunSignals]], dict[str, list[Event]]]
# (the finding, all findings of the run, the run's signals) -> (cause code or None, related figures)
Diagnose = Callable[[Event, list[Event], RunSignals], tuple[str | None, dict[str, Any]]]


@dataclass(frozen=True)
class Kind:
    name: str
    messages: tuple[str, ...]  # catalogue ids of its messages and of the clauses they use
    advice: tuple[str, ...] = ()  # catalogue ids of what to do
    causes: tuple[str, ...] = ()  # `contract.CAUSES` codes its diagnosis may give
    run_checks: tuple[RunCheck, ...] = ()  # a check may find several kinds: each of them lists it
    job_checks: tuple[JobCheck, ...] = ()
    diagnose: Diagnose | None = None

    def __post_init__(self) -> None:
        unknown = set(self.causes) - set(CAUSES)
        if unknown:
            raise ValueError(f"kind {self.name}: causes not in the contract: {sorted(unknown)}")


_REGISTERED: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    if kind.name in _REGISTERED and _REGISTERED[kind.name] != kind:
        raise ValueError(f"finding kind {kind.name!r} registered twice")
    _REGISTERED[kind.name] = kind
    return kind


@lru_cache(maxsize=1)
def registry() -> tuple[Kind, ...]:
    """Every kind, in the contract's order (kinds it does not list last, by name)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    order = {name: index for index, name in enumerate(KINDS)}
    return tuple(sorted(_REGISTERED.values(), key=lambda k: (order.get(k.name, len(order)), k.name)))


def kind(name: str) -> Kind | None:
    return next((k for k in registry() if k.name == name), None)


def _unique(checks):
    seen: dict[int, Any] = {}
    for check in checks:
        seen.setdefault(id(check), check)
    return list(seen.values())


def run_checks() -> list[RunCheck]:
    return _unique(check for k in registry() for check in k.run_checks)


def job_checks() -> list[JobCheck]:
    return _unique(check for k in registry() for check in k.job_checks)


def diagnosers() -> dict[str, Diagnose]:
    return {k.name: k.diagnose for k in registry() if k.diagnose is not None}
