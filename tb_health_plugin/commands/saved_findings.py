"""A run's own findings (`analysis.event.Event`s, before any cross-rank check or diagnosis) as
JSON and back, exactly: `Phrase`s, tuples and numpy scalars are tagged so that what is read
back equals what was saved (`test_check_cache` compares reports byte for byte)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tb_health_plugin.analysis.event import Event, Phrase

_TAG = "__tb_health__"


def _encode(value: Any) -> Any:
    if isinstance(value, Phrase):
        return {_TAG: "phrase", "id": value.id}
    if isinstance(value, np.generic):
        return {_TAG: "numpy", "dtype": value.dtype.str, "value": value.item()}
    if isinstance(value, tuple):
        return {_TAG: "tuple", "items": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or _TAG in value:
            raise TypeError("only string keys are saved")
        return {k: _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)) and type(value) in (bool, int, float, str):
        return value
    raise TypeError(f"cannot save a {type(value).__name__} in a finding")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        kind = value.get(_TAG)
        if kind == "phrase":
            return Phrase(value["id"])
        if kind == "numpy":
            return np.dtype(value["dtype"]).type(value["value"])
        if kind == "tuple":
            return tuple(_decode(v) for v in value["items"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def findings_to_json(events: list[Event]) -> list[dict[str, Any]]:
    """TypeError for a finding holding something that would not come back the same."""
    return [_encode({f.name: getattr(event, f.name) for f in dataclasses.fields(Event)}) for event in events]


def findings_from_json(saved: list[dict[str, Any]]) -> list[Event]:
    return [Event(**_decode(fields)) for fields in saved]
