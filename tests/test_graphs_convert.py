"""MindSpore graph -> TensorBoard GraphDef on hand-built graphs (the corner cases a small real
network does not show), the graph events of summary files, and `HealthLogger(graph=...)`.

The graphs are built with our schema and written into summary files framed like MindSpore's;
the real trainings are in test_graphs_mindspore.py.
"""

from __future__ import annotations

import struct

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef

from tb_health_plugin.graphs.anf_ir_schema import GraphEvent, GraphProto, ModelProto
from tb_health_plugin.graphs.mindspore_graph import graph_def_from_mindspore, parse_model_proto
from tb_health_plugin.graphs.summary_graphs import latest_graph_event, read_graphs
from tb_health_plugin.readers.schema import MsEvent
from tb_health_plugin.tfrecord import masked_crc

FLOAT32, INT64, TENSOR, TUPLE, MONAD = 11, 5, 14, 31, 0


def tensor_type(message, *dims, elem=FLOAT32):
    message.data_type = TENSOR
    message.tensor_type.elem_type = elem
    for size in dims:
        message.tensor_type.shape.dim.add(size=size)


def small_graph() -> GraphProto:
    """x -> Dense (MatMul + BiasAdd) -> Split (a tuple) -> TupleGetItem, plus a control edge, a
    constant, an attribute of each kind and a node without a scope name."""
    graph = GraphProto(name="g")
    x = graph.parameters.add(name="x")
    tensor_type(x.type, 4, 8)
    weight = graph.parameters.add(name="dense.weight")
    tensor_type(weight.type, 16, 8)
    graph.parameters.add(name="global_step")
    constant = graph.const_vals.add(key="cst1")
    constant.value.dtype = TUPLE
    for value in (-1, 8):
        constant.value.values.add(dtype=INT64, int_val=value)
    scope = "Default/network-Net/dense-Dense"
    matmul = graph.node.add(name="1", op_type="MatMul", scope=scope, full_name=f"{scope}/MatMul-op0")
    matmul.input.add(name="x")
    matmul.input.add(name="dense.weight")
    matmul.input.add(name="cst1")
    tensor_type(matmul.output_type, 4, 16)
    matmul.attribute.add(name="transpose_b").value.bool_val = True
    matmul.attribute.add(name="big").value.uint_val = (1 << 64) - 1
    matmul.attribute.add(name="scale").value.float_val = 0.5
    matmul.attribute.add(name="format").value.str_val = "NCHW"
    split = graph.node.add(name="2", op_type="Split", scope="Default", full_name="Default/Split-op0")
    split.input.add(name="1")
    split.output_type.data_type = TUPLE
    for _ in range(2):
        tensor_type(split.output_type.sequence_type.elem_types.add(), 4, 8)
    item = graph.node.add(name="3", op_type="TupleGetItem", scope=scope)  # no full_name
    item.input.add(name="2")
    item.input.add(name="1", type=1)  # control edge
    tensor_type(item.output_type, 4, 8)
    update = graph.node.add(name="4", op_type="AssignAdd", scope="Default/optimizer-Adam",
                            full_name="Default/optimizer-Adam/AssignAdd-op0")
    update.input.add(name="global_step")
    update.output_type.data_type = MONAD
    return graph


def nodes_by_name(graph_def: GraphDef) -> dict[str, NodeDef]:
    return {node.name: node for node in graph_def.node}


def test_operators_are_named_by_scope_with_types_shapes_and_edges():
    nodes = nodes_by_name(graph_def_from_mindspore(small_graph()))
    scope = "Default/network-Net/dense-Dense"
    matmul = nodes[f"{scope}/MatMul-op0"]
    assert matmul.op == "MatMul"
    assert list(matmul.input) == [f"{scope}/x", f"{scope}/dense.weight"]
    assert [d.size for d in matmul.attr["_output_shapes"].list.shape[0].dim] == [4, 16]
    assert matmul.attr["dtype"].type == types_pb2.DT_FLOAT
    assert matmul.attr["_constant_inputs"].list.s == [b"cst1 = (-1, 8)"]
    assert matmul.attr["transpose_b"].b is True and matmul.attr["scale"].f == 0.5
    assert matmul.attr["format"].s == b"NCHW"
    assert matmul.attr["big"].s == str((1 << 64) - 1).encode()  # beyond int64: kept as text
    split = nodes["Default/Split-op0"]
    assert len(split.attr["_output_shapes"].list.shape) == 2 and "dtype" not in split.attr
    assert split.attr["_ms_type"].s == b"Tuple[Tensor[Float32], Tensor[Float32]]"
    item = nodes[f"{scope}/TupleGetItem-3"]
    assert list(item.input) == ["Default/Split-op0", f"^{scope}/MatMul-op0"]


def test_parameters_go_to_the_scope_their_name_or_their_users_name():
    nodes = nodes_by_name(graph_def_from_mindspore(small_graph()))
    parameters = {name for name, node in nodes.items() if node.op == "Parameter"}
    assert parameters == {
        "Default/network-Net/dense-Dense/dense.weight",  # named by its layer's attribute
        "Default/network-Net/dense-Dense/x",  # used only there
        "Default/optimizer-Adam/global_step",  # used only by the optimizer
    }
    weight = nodes["Default/network-Net/dense-Dense/dense.weight"]
    assert [d.size for d in weight.attr["_output_shapes"].list.shape[0].dim] == [16, 8]


def test_node_names_stay_unique():
    graph = small_graph()
    twin = graph.node.add(name="9", op_type="MatMul", full_name="Default/network-Net/dense-Dense/MatMul-op0")
    twin.input.add(name="x")
    names = [node.name for node in graph_def_from_mindspore(graph).node]
    assert len(names) == len(set(names)) == len(graph.node) + len(graph.parameters)


def framed(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


def scalar_event(step: int) -> bytes:
    event = MsEvent(wall_time=1.0 + step, step=step)
    event.summary.value.add(tag="loss", scalar_value=0.5)
    return event.SerializeToString()


def graph_event(step: int, graph: GraphProto) -> bytes:
    return GraphEvent(wall_time=1.0 + step, step=step, graph_def=graph).SerializeToString()


def test_graph_events_are_found_between_damaged_and_unusual_records(tmp_path, monkeypatch):
    first, last = small_graph(), small_graph()
    last.name = "resumed"
    reordered = GraphEvent(graph_def=first).SerializeToString() + struct.pack("<Bd", 0x09, 5.0)  # wall time last
    damaged = bytearray(framed(graph_event(3, first)))
    damaged[20] ^= 0xFF
    data = b"".join([
        framed(scalar_event(1)), framed(graph_event(2, first)), bytes(damaged), framed(reordered),
        *(framed(scalar_event(step)) for step in range(4, 200)), framed(graph_event(200, last)),
        framed(graph_event(201, first))[:30],  # a record still being written
    ])
    path = tmp_path / "events.out.events.summary.1.0.host_MS"
    path.write_bytes(data)
    monkeypatch.setattr("tb_health_plugin.graphs.summary_graphs.READ_CHUNK_BYTES", 64)  # records span chunks
    found = read_graphs(str(path))
    assert [(g.step, g.graph.name) for g in found] == [(2, "g"), (0, "g"), (200, "resumed")]
    event = latest_graph_event([str(path)])
    assert event.step == 200
    assert len(GraphDef.FromString(event.graph_def).node) == len(last.node) + len(last.parameters)


def test_a_summary_without_graph_converts_without_one(tmp_path):
    path = tmp_path / "events.out.events.summary.1.0.host_MS"
    path.write_bytes(b"".join(framed(scalar_event(step)) for step in range(1, 50)))
    assert read_graphs(str(path)) == []
    assert latest_graph_event([str(path)]) is None


def test_model_proto_bytes_as_mindspore_returns_them():
    serialized = ModelProto(graph=small_graph()).SerializeToString()
    assert parse_model_proto(serialized) == small_graph()


def test_health_logger_writes_the_graph_once_and_a_bad_graph_only_warns(tmp_path):
    from trainer_hooks import HealthLogger

    serialized = ModelProto(graph=small_graph()).SerializeToString()
    with HealthLogger(tmp_path, rank=0, online_analysis=False, graph=serialized) as health:
        health.log_step(1, 0.5)
    with pytest.warns(RuntimeWarning, match="log_graph"):
        with HealthLogger(tmp_path / "bad", rank=0, online_analysis=False, graph="not a graph") as health:
            health.log_step(1, 0.5)
    (path,) = (tmp_path / "rank_0").glob("*tfevents*")
    graphs = [GraphDef.FromString(e.graph_def) for e in EventFileLoader(str(path)).Load() if e.HasField("graph_def")]
    assert len(graphs) == 1
    assert graphs[0] == graph_def_from_mindspore(small_graph())
    (bad,) = (tmp_path / "bad" / "rank_0").glob("*tfevents*")
    assert not [e for e in EventFileLoader(str(bad)).Load() if e.HasField("graph_def")]
