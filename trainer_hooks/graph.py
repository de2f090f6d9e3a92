"""The network's graph for TensorBoard's Graphs tab, from MindSpore's own compiled graph.

MindSpore hands out a compiled cell's graph as an anf_ir `GraphProto` (`Cell.get_func_graph_proto()`,
what `SummaryCollector` records); `tb_health_plugin.graphs.mindspore_graph` turns it into the
TensorBoard `GraphDef` logged as `Event.graph_def`.

- Graph mode: `Model.train` compiled the training cell at its first step; its graph is read
  then, at no extra cost (`compiled_graph`).
- PyNative: nothing is compiled, so the cell the training cell wraps (network + loss, without
  the backward pass and optimizer) is compiled once in graph mode, only to read its graph; it is
  not run (`compile_graph`). What that costs is in the README ("The network graph").
"""

from __future__ import annotations

from typing import Any


def to_graph_def(graph: Any):
    """A TensorBoard `GraphDef` from a `GraphDef` (returned as is) or MindSpore's anf_ir graph:
    the bytes `Cell.get_func_graph_proto()` returns (a `ModelProto`), or a parsed `ModelProto`
    or `GraphProto`."""
    from tensorboard.compat.proto.graph_pb2 import GraphDef

    from tb_health_plugin.graphs.mindspore_graph import (
        graph_def_from_mindspore,
        parse_graph_proto,
        parse_model_proto,
    )

    if isinstance(graph, GraphDef):
        return graph
    if isinstance(graph, (bytes, bytearray, memoryview)):
        return graph_def_from_mindspore(parse_model_proto(bytes(graph)))
    if hasattr(graph, "SerializeToString") and hasattr(graph, "node") and hasattr(graph, "parameters"):
        return graph_def_from_mindspore(parse_graph_proto(graph.SerializeToString()))
    if hasattr(graph, "SerializeToString") and hasattr(graph, "graph"):
        return graph_def_from_mindspore(parse_model_proto(graph.SerializeToString()))
    raise TypeError(
        "graph must be a TensorBoard GraphDef or a MindSpore graph (Cell.get_func_graph_proto() bytes), "
        f"got {type(graph).__name__}"
    )


def compiled_graph(cell) -> bytes | None:
    """The anf_ir graph of `cell` as compiled for graph mode, or None (not compiled, PyNative)."""
    try:
        graph = cell.get_func_graph_proto()
    except Exception:  # noqa: BLE001 - MindSpore raises when the cell was never compiled
        return None
    return bytes(graph) if graph else None


def compile_graph(cell, *inputs) -> bytes | None:
    """Compile `cell` for `inputs` in graph mode (nothing runs) and return its anf_ir graph."""
    cell.compile(*inputs)
    return compiled_graph(cell)


def wrapped_cell(train_network):
    """The cell a training cell wraps (`TrainOneStepCell(WithLossCell(...))` -> the loss cell):
    the forward pass and loss, which compile much faster than the whole step."""
    inner = getattr(train_network, "network", None)
    return inner if inner is not None and hasattr(inner, "compile") else train_network
