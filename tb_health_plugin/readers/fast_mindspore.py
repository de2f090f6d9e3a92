"""Vectorised decoding of MindSpore summary events that hold only `scalar_value`s.

`SummaryRecord` writes one event per recorded step with every value of that step in it:

    09 <wall_time: 8>  [10 <step: varint>]  2a <summary len: varint>  then per value:
        0a <value len>  0a <tag len> <tag>  1d <float: 4 bytes>

An event is decoded here (`scalar_events.decode_scalar_summaries`) when every value in it is a
scalar in this layout; any other event (histograms, tensors, the version record) goes whole
through the protobuf path. Results are identical (tests/test_readers_mindspore.py compares both
paths on real files).
"""

from __future__ import annotations

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.scalar_events import decode_scalar_summaries

SCALAR_VALUE_KEY = 0x1D  # `Summary.Value.scalar_value`, field 3, 32-bit


def decode_scalar_events(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ScalarPoints]:
    """(decoded mask per record, the scalar points of the decoded records)."""
    return decode_scalar_summaries(raw, starts, lengths, SCALAR_VALUE_KEY, empty_decoded=True)
