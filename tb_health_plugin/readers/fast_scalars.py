"""Vectorised decoding of the commonest tfevents records: events of legacy `simple_value` scalars.

TensorBoard's `EventFileWriter`, tensorboardX, torch's `SummaryWriter` and MindFormers serialise
such an event (fields in number order) as

    09 <wall_time: 8 bytes>  [10 <step: varint>]  2a <len>  then per value:
        0a <len>  0a <tag len> <tag>  15 <float: 4 bytes>

(`step` is omitted when it is 0), with one value per event or, when a trainer logs several tags
in one `Summary` (one event per step for loss, learning rate, gradient norm...), several. This
module checks that exact layout for all records at once with numpy gathers
(`scalar_events.decode_scalar_summaries`) and decodes wall time, step, tags and values without
creating protobuf objects. Records in any other layout (metadata, long tags, tensors, ...) are
reported as not decoded and go through the protobuf path; results are identical either way
(tests/test_readers_fast_path.py checks that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tb_health_plugin.readers.points import ScalarPoints
from tb_health_plugin.readers.scalar_events import decode_scalar_summaries

SIMPLE_VALUE_KEY = 0x15  # `Summary.Value.simple_value`, field 2, 32-bit


@dataclass
class FastScalars:
    decoded: np.ndarray  # bool per record: True if decoded here
    points: ScalarPoints


def decode_simple_values(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> FastScalars:
    """Decode every record laid out as an event of one or more `simple_value` scalars.

    An event with an empty summary is left to protobuf: it has no point, yet its wall time is
    the run's latest there."""
    decoded, points = decode_scalar_summaries(raw, starts, lengths, SIMPLE_VALUE_KEY, empty_decoded=False)
    return FastScalars(decoded, points)
