"""The network graphs recorded in MindSpore summary files (`SummaryCollector` with
`collect_graph`, or `SummaryRecord.add_value("graph", ...)`): `Event.graph_def`, field 4.

The scalar and histogram reader skips these events; `tb-health convert` reads them here in a
second pass over the file's records. Only records that start like a graph event are parsed:
MindSpore writes an event's fields in field-number order, `09 <wall_time: 8> [10 <step:
varint>] 22 <graph length>`, so the key after the wall time and step tells a graph event from
the scalar and histogram ones without parsing them. A record in another layout is parsed whole
(protobuf allows any field order), so none is missed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tb_health_plugin.graphs.anf_ir_schema import GraphEvent, GraphProto
from tb_health_plugin.readers.logdir_reader import open_regular_file
from tb_health_plugin.readers.records import FRAME_BYTES, HEADER_BYTES, scan_records
from tb_health_plugin.readers.wire import event_heads, gather

READ_CHUNK_BYTES = 4 << 20
GRAPH_KEY = 0x22


@dataclass
class RecordedGraph:
    step: int
    wall_time: float
    graph: GraphProto


def _graph_candidates(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices of the records that may hold a graph: the graph key after wall time and step, or
    a layout other than MindSpore's usual one."""
    heads = event_heads(raw, starts, lengths, 10)
    graph_key = heads.ok & (gather(raw, heads.after) == GRAPH_KEY)
    return np.flatnonzero(graph_key | ~heads.ok)


def read_graphs(path: str) -> list[RecordedGraph]:
    """Every graph event of one MindSpore summary file, in write order. Damaged records are
    skipped (the scalar reader counts them); an unreadable file raises OSError."""
    graphs: list[RecordedGraph] = []
    with open_regular_file(path) as handle:
        offset, resyncing = 0, False
        while True:
            handle.seek(offset)
            buf = handle.read(READ_CHUNK_BYTES)
            if not buf:
                break
            scan = scan_records(buf, resyncing)
            if scan.consumed == 0 and not scan.resyncing and len(buf) >= HEADER_BYTES:
                needed = int.from_bytes(buf[:8], "little") + FRAME_BYTES  # one record bigger than a chunk
                if needed <= len(buf):
                    break
                handle.seek(offset)
                buf = handle.read(needed)
                scan = scan_records(buf)
            if scan.consumed == 0:
                break
            raw = np.frombuffer(buf, dtype=np.uint8)
            for index in _graph_candidates(raw, scan.starts, scan.lengths).tolist():
                start, length = int(scan.starts[index]), int(scan.lengths[index])
                try:
                    event = GraphEvent.FromString(buf[start : start + length])
                except Exception:  # noqa: BLE001 - an undecodable record is skipped, as the reader does
                    continue
                if event.HasField("graph_def"):
                    graphs.append(RecordedGraph(event.step, event.wall_time, event.graph_def))
            offset += scan.consumed
            resyncing = scan.resyncing
    return graphs


def latest_graph_event(paths: list[str]):
    """TensorBoard's `Event` holding the last graph recorded in these files (in read order), or
    None. TensorBoard's Graphs tab shows one graph per run; a resumed training records its graph
    again, and the last one is the network as it ran last."""
    from tensorboard.compat.proto.event_pb2 import Event

    from tb_health_plugin.graphs.mindspore_graph import graph_def_from_mindspore

    recorded = [graph for path in paths for graph in read_graphs(path)]
    if not recorded:
        return None
    last = recorded[-1]
    graph_def = graph_def_from_mindspore(last.graph)
    return Event(wall_time=last.wall_time, step=last.step, graph_def=graph_def.SerializeToString())
