"""The graph messages of MindSpore's `anf_ir.proto` (package `mindspore.irpb`), as a descriptor
built at import, the way `readers/schema.py` builds the summary schema.

Field numbers and wire types are MindSpore's; the package differs on purpose, so this schema and
MindSpore's own can live in one process. Enums (`DataType`, `EdgeType`) are declared `int32`
(the same varint on the wire), so their values stay plain numbers: `MS_DTYPE_NAMES` names them.
Only what a graph drawing needs is declared; everything else (`OperatorSetProto`, explanations,
summaries) is skipped as unknown fields when parsing.

    message GraphProto      { repeated NodeProto node = 1; string name = 2;
                              repeated ParameterProto parameters = 3; repeated OutputProto outputs = 4;
                              repeated NamedValueProto const_vals = 5; }
    message NodeProto       { repeated InputProto input = 1; string name = 2; string op_type = 3;
                              string scope = 4; repeated AttributeProto attribute = 5;
                              TypeProto output_type = 6; uint64 output_i = 7; string full_name = 8;
                              string instance_name = 10; }
    message InputProto      { string name = 1; int32 type = 2; }        // 0 data edge, 1 control edge
    message ParameterProto  { string name = 1; TypeProto type = 2; ValueProto default_val = 3; }
    message OutputProto     { string name = 1; TypeProto type = 2; }
    message TypeProto       { int32 data_type = 1; oneof { Tensor tensor_type = 2; Sequence sequence_type = 3; } }
    message TypeProto.Tensor   { int32 elem_type = 1; TensorShapeProto shape = 2; }
    message TypeProto.Sequence { repeated TypeProto elem_types = 1; }
    message TensorShapeProto   { repeated Dimension dim = 1; }  // Dimension { int64 size = 1; string name = 2; }
    message AttributeProto  { string name = 1; ValueProto value = 2; }
    message NamedValueProto { string key = 1; ValueProto value = 2; }
    message ValueProto      { int32 dtype = 1; bool bool_val = 2; int64 int_val = 3; uint64 uint_val = 4;
                              float float_val = 5; double double_val = 6; string str_val = 7;
                              TensorProto tensor_val = 8; repeated ValueProto values = 18; TypeProto type_val = 20; }
    message TensorProto     { repeated int64 dims = 1; int32 data_type = 2; }
    message ModelProto      { GraphProto graph = 4; }   // what `Cell.get_func_graph_proto()` returns
    message GraphEvent      { double wall_time = 1; int64 step = 2; GraphProto graph_def = 4; }  // summary Event
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from tb_health_plugin.readers.schema import _message_class, _register, mindspore_file_descriptor

GRAPH_PROTO_FILE = "tb_health_plugin/graphs/mindspore_anf_ir_graph.proto"  # built, not shipped
GRAPH_PACKAGE = "tb_health.mindspore_graph"

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I32, _I64, _U64, _STR = _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_STRING

GRAPH_MESSAGES: dict[str, list[tuple]] = {
    "TensorShapeProto": [("dim", 1, _REP, "TensorShapeProto.Dimension", None, False)],
    "TensorShapeProto.Dimension": [("size", 1, _OPT, _I64, None, False), ("name", 2, _OPT, _STR, None, False)],
    "TypeProto": [
        ("data_type", 1, _OPT, _I32, None, False),
        ("tensor_type", 2, _OPT, "TypeProto.Tensor", "value", False),
        ("sequence_type", 3, _OPT, "TypeProto.Sequence", "value", False),
    ],
    "TypeProto.Tensor": [("elem_type", 1, _OPT, _I32, None, False), ("shape", 2, _OPT, "TensorShapeProto", None, False)],
    "TypeProto.Sequence": [("elem_types", 1, _REP, "TypeProto", None, False)],
    "TensorProto": [("dims", 1, _REP, _I64, None, False), ("data_type", 2, _OPT, _I32, None, False)],
    "ValueProto": [
        ("dtype", 1, _OPT, _I32, None, False),
        ("bool_val", 2, _OPT, _F.TYPE_BOOL, None, False),
        ("int_val", 3, _OPT, _I64, None, False),
        ("uint_val", 4, _OPT, _U64, None, False),
        ("float_val", 5, _OPT, _F.TYPE_FLOAT, None, False),
        ("double_val", 6, _OPT, _F.TYPE_DOUBLE, None, False),
        ("str_val", 7, _OPT, _STR, None, False),
        ("tensor_val", 8, _OPT, "TensorProto", None, False),
        ("values", 18, _REP, "ValueProto", None, False),
        ("type_val", 20, _OPT, "TypeProto", None, False),
    ],
    "AttributeProto": [("name", 1, _OPT, _STR, None, False), ("value", 2, _OPT, "ValueProto", None, False)],
    "NamedValueProto": [("key", 1, _OPT, _STR, None, False), ("value", 2, _OPT, "ValueProto", None, False)],
    "InputProto": [("name", 1, _OPT, _STR, None, False), ("type", 2, _OPT, _I32, None, False)],
    "ParameterProto": [
        ("name", 1, _OPT, _STR, None, False),
        ("type", 2, _OPT, "TypeProto", None, False),
        ("default_val", 3, _OPT, "ValueProto", None, False),
    ],
    "OutputProto": [("name", 1, _OPT, _STR, None, False), ("type", 2, _OPT, "TypeProto", None, False)],
    "NodeProto": [
        ("input", 1, _REP, "InputProto", None, False),
        ("name", 2, _OPT, _STR, None, False),
        ("op_type", 3, _OPT, _STR, None, False),
        ("scope", 4, _OPT, _STR, None, False),
        ("attribute", 5, _REP, "AttributeProto", None, False),
        ("output_type", 6, _OPT, "TypeProto", None, False),
        ("output_i", 7, _OPT, _U64, None, False),
        ("full_name", 8, _OPT, _STR, None, False),
        ("instance_name", 10, _OPT, _STR, None, False),
    ],
    "GraphProto": [
        ("node", 1, _REP, "NodeProto", None, False),
        ("name", 2, _OPT, _STR, None, False),
        ("parameters", 3, _REP, "ParameterProto", None, False),
        ("outputs", 4, _REP, "OutputProto", None, False),
        ("const_vals", 5, _REP, "NamedValueProto", None, False),
    ],
    "ModelProto": [("graph", 4, _OPT, "GraphProto", None, False)],
    "GraphEvent": [
        ("wall_time", 1, _OPT, _F.TYPE_DOUBLE, None, False),
        ("step", 2, _OPT, _I64, None, False),
        ("graph_def", 4, _OPT, "GraphProto", None, False),
    ],
}

# MindSpore's DataType enum values that graphs use, by number (anf_ir.proto `DataType`).
MS_DTYPE_NAMES = {
    0: "Undefined", 1: "Bool", 2: "Int8", 3: "Int16", 4: "Int32", 5: "Int64", 6: "UInt8", 7: "UInt16",
    8: "UInt32", 9: "UInt64", 10: "Float16", 11: "Float32", 12: "Float64", 13: "String", 14: "Tensor",
    15: "Graph", 31: "Tuple", 32: "List", 33: "Dict", 34: "None", 39: "Type", 40: "Any", 41: "RefKey",
    42: "Ref", 43: "Complex64", 44: "Complex128", 46: "BFloat16", 48: "Int4", 49: "Slice",
}
MS_TENSOR, MS_TUPLE, MS_LIST = 14, 31, 32

_register(mindspore_file_descriptor(GRAPH_PROTO_FILE, GRAPH_PACKAGE, GRAPH_MESSAGES))

GraphProto = _message_class(f"{GRAPH_PACKAGE}.GraphProto")
GraphEvent = _message_class(f"{GRAPH_PACKAGE}.GraphEvent")
ModelProto = _message_class(f"{GRAPH_PACKAGE}.ModelProto")
