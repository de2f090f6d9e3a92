"""MindSpore `GraphProto` (anf_ir, what `SummaryCollector` records and `Cell.get_func_graph_proto()`
returns) -> TensorBoard `GraphDef`, so TensorBoard's Graphs tab draws MindSpore networks.

How the graph is mapped (a pure function of the parsed proto):
- every operator node becomes a `NodeDef` named by its MindSpore scope name (`full_name`, e.g.
  `Default/network-WithLossCell/_backbone-Net/embed-Dense/MatMul-op0`); TensorBoard splits names
  on `/`, so each Cell (`<attribute>-<class>`) is a scope that collapses and expands, as for
  TensorFlow and PyTorch graphs;
- its `op` is MindSpore's operator type (`MatMul`, `Softmax`, `LayerNorm`...);
- data inputs become edges, control inputs `^name` edges; inputs from constants (`cst<k>`) are
  not nodes, their values are listed in the node's `_constant_inputs` attribute instead (a
  monad or a shape tuple feeding dozens of nodes would only clutter the drawing);
- the output type becomes `_output_shapes` (one shape per tensor output, what TensorBoard labels
  edges with), `dtype` (TensorFlow's type enum, for single tensors of a type it has) and
  `_ms_type`, MindSpore's own type text (tuples and monads have no TensorFlow equivalent);
  MindSpore's operator attributes become string, int, float or bool attributes;
- every graph parameter (weights, optimizer state, the data inputs) becomes a `Parameter` node.
  A weight is placed in the scope of the Cell its name names (`block.self_attn.in_proj_weight`
  under `.../block-TransformerEncoderLayer/self_attn-MultiheadAttention/`), so it sits beside the
  operators of its layer and the Health tab can find it by the parameter name that its findings
  carry (the node's last name segment is the full parameter name). A parameter no scope names
  (optimizer moments, `global_step`, data inputs) goes to the deepest scope shared by its users.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable

from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from tb_health_plugin.graphs.anf_ir_schema import MS_DTYPE_NAMES, MS_LIST, GraphProto, ModelProto

PARAMETER_OP = "Parameter"
CONTROL_EDGE = 1  # InputProto.EdgeType.CONTROL_EDGE
MAX_CONSTANT_TEXT = 80  # characters of one constant's value kept in `_constant_inputs`
MAX_SEQUENCE_ITEMS = 8  # items of a tuple constant shown before "..."

# MindSpore DataType number -> TensorFlow DataType (the types both have).
TF_DTYPES = {
    1: types_pb2.DT_BOOL, 2: types_pb2.DT_INT8, 3: types_pb2.DT_INT16, 4: types_pb2.DT_INT32,
    5: types_pb2.DT_INT64, 6: types_pb2.DT_UINT8, 7: types_pb2.DT_UINT16, 8: types_pb2.DT_UINT32,
    9: types_pb2.DT_UINT64, 10: types_pb2.DT_HALF, 11: types_pb2.DT_FLOAT, 12: types_pb2.DT_DOUBLE,
    13: types_pb2.DT_STRING, 43: types_pb2.DT_COMPLEX64, 44: types_pb2.DT_COMPLEX128, 46: types_pb2.DT_BFLOAT16,
}


def parse_graph_proto(serialized: bytes) -> GraphProto:
    """A serialized MindSpore anf_ir `GraphProto` (as in a summary file's graph event)."""
    return GraphProto.FromString(serialized)


def parse_model_proto(serialized: bytes) -> GraphProto:
    """The graph of a serialized anf_ir `ModelProto` (what `Cell.get_func_graph_proto()` returns)."""
    return ModelProto.FromString(serialized).graph


def graph_def_from_mindspore(graph: GraphProto) -> GraphDef:
    """TensorBoard's `GraphDef` for a parsed MindSpore `GraphProto` (see the module docstring)."""
    node_names = _operator_names(graph)
    parameter_names = _parameter_names(graph, node_names)
    constants = {named.key: _value_text(named.value) for named in graph.const_vals}
    names = {**node_names, **parameter_names}
    nodes = [
        NodeDef(name=parameter_names[parameter.name], op=PARAMETER_OP, attr=_type_attrs(parameter.type))
        for parameter in graph.parameters
    ]
    for node in graph.node:
        attr = _type_attrs(node.output_type)
        attr.update(_operator_attrs(node.attribute))
        inputs, constant_inputs = [], []
        for edge in node.input:
            source = names.get(edge.name)
            if source is None:
                constant_inputs.append(f"{edge.name} = {constants.get(edge.name, '?')}")
            else:
                inputs.append(f"^{source}" if edge.type == CONTROL_EDGE else source)
        if constant_inputs:
            attr["_constant_inputs"] = AttrValue(list=AttrValue.ListValue(s=[text.encode() for text in constant_inputs]))
        nodes.append(NodeDef(name=node_names[node.name], op=node.op_type or "Unknown", input=inputs, attr=attr))
    return GraphDef(node=nodes)


def _operator_names(graph: GraphProto) -> dict[str, str]:
    """MindSpore node id -> unique scope name (`full_name`, or scope + op type + id without one)."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for node in graph.node:
        name = node.full_name or "/".join(part for part in (node.scope, f"{node.op_type or 'Node'}-{node.name}") if part)
        if name in taken:
            name = f"{name}_{node.name}"
        taken.add(name)
        names[node.name] = name
    return names


def _segments(scope: str) -> list[str]:
    return [segment for segment in scope.split("/") if segment]


def _attribute_path(scope: str) -> tuple[str, ...]:
    """The Cell attribute names along a scope (`Default/network-WithLossCell/_backbone-Net` ->
    `("network", "_backbone")`): what parameter names are made of."""
    return tuple(segment.split("-", 1)[0] for segment in _segments(scope)[1:])


def _forward_scopes(node_names: Iterable[str]) -> dict[tuple[str, ...], str]:
    """Attribute path -> the shortest forward scope with that path (every prefix of every
    operator's scope; the `Gradients/...` mirror of the forward scopes is left out)."""
    scopes: dict[tuple[str, ...], str] = {}
    for name in node_names:
        segments = _segments(name)[:-1]
        if not segments or segments[0] == "Gradients":
            continue
        for end in range(1, len(segments) + 1):
            scope = "/".join(segments[:end])
            path = _attribute_path(scope)
            if path not in scopes or len(scope) < len(scopes[path]):
                scopes[path] = scope
    return scopes


def _scope_named_by(parameter: str, scopes: dict[tuple[str, ...], str]) -> str | None:
    """The scope of the Cell a parameter name names (`block.norm1.gamma` -> the scope whose
    attribute path ends in `block/norm1`); its missing tail becomes new scope segments when
    only its head is found (MindSpore may fuse a layer's operators into a neighbour's scope)."""
    cells = parameter.split(".")[:-1]
    for depth in range(len(cells), 0, -1):
        wanted = tuple(cells[:depth])
        matches = [scope for path, scope in scopes.items() if path[-depth:] == wanted]
        if matches:
            return "/".join([min(matches, key=lambda scope: (len(scope), scope)), *cells[depth:]])
    return None


def _common_scope(scopes: list[str]) -> str:
    if not scopes:
        return ""
    parts = [_segments(scope) for scope in scopes]
    shared = os.path.commonprefix(parts)
    return "/".join(shared)


def _parameter_names(graph: GraphProto, node_names: dict[str, str]) -> dict[str, str]:
    """Parameter name -> node name `<scope>/<parameter name>` (see the module docstring)."""
    users: dict[str, list[str]] = defaultdict(list)
    for node in graph.node:
        for edge in node.input:
            users[edge.name].append("/".join(_segments(node_names[node.name])[:-1]))
    scopes = _forward_scopes(node_names.values())
    taken = set(node_names.values())
    names = {}
    for parameter in graph.parameters:
        scope = _scope_named_by(parameter.name, scopes)
        if scope is None:
            scope = _common_scope(users.get(parameter.name, []))
        name = f"{scope}/{parameter.name}" if scope else parameter.name
        while name in taken:
            name += "_"
        taken.add(name)
        names[parameter.name] = name
    return names


def _tensor_shapes(type_proto) -> list[TensorShapeProto]:
    """One shape per tensor the type holds (a tuple's elements in order; nested tuples flattened)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        tensor = type_proto.tensor_type
        if not tensor.HasField("shape"):
            return [TensorShapeProto(unknown_rank=True)]
        return [TensorShapeProto(dim=[TensorShapeProto.Dim(size=d.size) for d in tensor.shape.dim])]
    if kind == "sequence_type":
        return [shape for element in type_proto.sequence_type.elem_types for shape in _tensor_shapes(element)]
    return []


def type_text(type_proto) -> str:
    """MindSpore's type as text: `Tensor[Float32]`, `Tuple[Tensor[Float32], Int64]`, `UMonad`..."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return f"Tensor[{MS_DTYPE_NAMES.get(type_proto.tensor_type.elem_type, type_proto.tensor_type.elem_type)}]"
    if kind == "sequence_type":
        outer = "List" if type_proto.data_type == MS_LIST else "Tuple"
        return f"{outer}[{', '.join(type_text(element) for element in type_proto.sequence_type.elem_types)}]"
    return str(MS_DTYPE_NAMES.get(type_proto.data_type, type_proto.data_type))


def _type_attrs(type_proto) -> dict[str, AttrValue]:
    attrs = {"_ms_type": AttrValue(s=type_text(type_proto).encode())}
    shapes = _tensor_shapes(type_proto)
    if shapes:
        attrs["_output_shapes"] = AttrValue(list=AttrValue.ListValue(shape=shapes))
    if type_proto.WhichOneof("value") == "tensor_type" and type_proto.tensor_type.elem_type in TF_DTYPES:
        attrs["dtype"] = AttrValue(type=TF_DTYPES[type_proto.tensor_type.elem_type])
    return attrs


def _scalar(value) -> bool | int | float | str | None:
    """A scalar ValueProto's Python value, None for anything else."""
    for field in ("bool_val", "int_val", "uint_val", "float_val", "double_val", "str_val"):
        if value.HasField(field):
            return getattr(value, field)
    return None


def _value_text(value, depth: int = 0) -> str:
    """Short text of a constant: `3`, `(-1, 8)`, `Tensor(16, 8)`, `'U'`..."""
    scalar = _scalar(value)
    if scalar is not None:
        text = repr(scalar)
    elif value.values:
        items = [_value_text(item, depth + 1) for item in value.values[:MAX_SEQUENCE_ITEMS]]
        more = ", ..." if len(value.values) > MAX_SEQUENCE_ITEMS else ""
        text = f"({', '.join(items)}{more})"
    elif value.HasField("tensor_val"):
        text = f"Tensor{tuple(value.tensor_val.dims)}"
    elif value.HasField("type_val"):
        text = type_text(value.type_val)
    else:
        text = str(MS_DTYPE_NAMES.get(value.dtype, value.dtype))
    return text if len(text) <= MAX_CONSTANT_TEXT else text[: MAX_CONSTANT_TEXT - 3] + "..."


def _operator_attrs(attributes) -> dict[str, AttrValue]:
    attrs = {}
    for attribute in attributes:
        scalar = _scalar(attribute.value)
        if isinstance(scalar, bool):
            attrs[attribute.name] = AttrValue(b=scalar)
        elif isinstance(scalar, int) and -(1 << 63) <= scalar < (1 << 63):
            attrs[attribute.name] = AttrValue(i=scalar)
        elif isinstance(scalar, float):
            attrs[attribute.name] = AttrValue(f=scalar)
        else:
            attrs[attribute.name] = AttrValue(s=(scalar if isinstance(scalar, str) else _value_text(attribute.value)).encode())
    return attrs

