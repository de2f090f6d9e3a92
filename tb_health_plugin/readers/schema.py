"""Protobuf message classes for reading logs, built at import (no protoc, no MindSpore import).

- `MsEvent`: MindSpore's summary schema as described in `proto/mindspore_summary.proto` (same
  field numbers and types as MindSpore's `mindspore.irpb`, under another package so both can be
  loaded in one process).
- `MsEventBatch`: a batch of those events in a variant of the schema whose histogram buckets
  are `repeated bytes` (the same wire format), so the reader decodes all buckets at once.
- `TbEventBatch`: a container of TensorBoard `Event`s (`repeated tensorboard.Event events = 1`).

The batch containers let one upb parse call decode thousands of records (see `batch.py`): field 1
holds the events, fields 2 and 3 absorb the rewritten TFRecord framing and the records between.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation
from tensorboard.compat.proto import event_pb2  # registers tensorboard.Event in the default pool

MS_PROTO_FILE = "tb_health_plugin/readers/proto/mindspore_summary.proto"
MS_PACKAGE = "tb_health.mindspore"
MS_RAW_BUCKETS_FILE = "tb_health_plugin/readers/proto/mindspore_summary_raw_buckets.proto"  # built, not shipped
MS_RAW_BUCKETS_PACKAGE = "tb_health.mindspore_raw_buckets"
TB_BATCH_FILE = "tb_health_plugin/readers/proto/tfevents_batch.proto"
TB_BATCH_PACKAGE = "tb_health.tfevents"

# The fast reading path relies on the C (upb) protobuf backend; the pure-python one is ~20x slower.
PROTOBUF_BACKEND = api_implementation.Type()

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REQUIRED, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REQUIRED, _F.LABEL_REPEATED

# message path -> [(name, number, label, type or message path, oneof name or None, packed)]
MS_MESSAGES: dict[str, list[tuple]] = {
    "TensorProto": [
        ("dims", 1, _REPEATED, _F.TYPE_INT64, None, False),
        ("data_type", 2, _OPTIONAL, _F.TYPE_INT32, None, False),
        ("float_data", 3, _REPEATED, _F.TYPE_FLOAT, None, True),
        ("int32_data", 4, _REPEATED, _F.TYPE_INT32, None, True),
        ("int64_data", 5, _REPEATED, _F.TYPE_INT64, None, True),
        ("double_data", 6, _REPEATED, _F.TYPE_DOUBLE, None, True),
        ("uint64_data", 7, _REPEATED, _F.TYPE_UINT64, None, True),
        ("raw_data", 8, _OPTIONAL, _F.TYPE_BYTES, None, False),
    ],
    "Summary.Histogram.bucket": [
        ("left", 1, _REQUIRED, _F.TYPE_DOUBLE, None, False),
        ("width", 2, _REQUIRED, _F.TYPE_DOUBLE, None, False),
        ("count", 3, _REQUIRED, _F.TYPE_INT64, None, False),
    ],
    "Summary.Histogram": [
        ("buckets", 1, _REPEATED, "Summary.Histogram.bucket", None, False),
        ("nan_count", 2, _OPTIONAL, _F.TYPE_INT64, None, False),
        ("pos_inf_count", 3, _OPTIONAL, _F.TYPE_INT64, None, False),
        ("neg_inf_count", 4, _OPTIONAL, _F.TYPE_INT64, None, False),
        ("max", 5, _OPTIONAL, _F.TYPE_DOUBLE, None, False),
        ("min", 6, _OPTIONAL, _F.TYPE_DOUBLE, None, False),
        ("sum", 7, _OPTIONAL, _F.TYPE_DOUBLE, None, False),
        ("count", 8, _OPTIONAL, _F.TYPE_INT64, None, False),
    ],
    "Summary.Value": [
        ("tag", 1, _REQUIRED, _F.TYPE_STRING, None, False),
        ("scalar_value", 3, _OPTIONAL, _F.TYPE_FLOAT, "value", False),
        ("tensor", 8, _OPTIONAL, "TensorProto", "value", False),
        ("histogram", 9, _OPTIONAL, "Summary.Histogram", "value", False),
    ],
    "Summary": [("value", 1, _REPEATED, "Summary.Value", None, False)],
    "Event": [
        ("wall_time", 1, _REQUIRED, _F.TYPE_DOUBLE, None, False),
        ("step", 2, _OPTIONAL, _F.TYPE_INT64, None, False),
        ("version", 3, _OPTIONAL, _F.TYPE_STRING, "what", False),
        ("summary", 5, _OPTIONAL, "Summary", "what", False),
    ],
    "EventBatch": [
        ("events", 1, _REPEATED, "Event", None, False),
        ("framing_padding", 2, _OPTIONAL, _F.TYPE_UINT64, None, False),
        ("skipped", 3, _OPTIONAL, _F.TYPE_BYTES, None, False),
    ],
}


def _children(container):
    """Where messages nest: a file's `message_type` or a message's `nested_type`."""
    return container.message_type if isinstance(container, descriptor_pb2.FileDescriptorProto) else container.nested_type


def _add_message(file_proto: descriptor_pb2.FileDescriptorProto, path: str, fields: list[tuple]) -> None:
    *parents, name = path.split(".")
    container = file_proto
    for parent in parents:
        container = next(m for m in _children(container) if m.name == parent)
    message = _children(container).add(name=name)
    oneofs: list[str] = []
    for field_name, number, label, kind, oneof, packed in fields:
        field = message.field.add(name=field_name, number=number, label=label)
        if isinstance(kind, str):
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{file_proto.package}.{kind}"
        else:
            field.type = kind
        if packed:
            field.options.packed = True
        if oneof is not None:
            if oneof not in oneofs:
                oneofs.append(oneof)
                message.oneof_decl.add(name=oneof)
            field.oneof_index = oneofs.index(oneof)


def mindspore_file_descriptor(name: str = MS_PROTO_FILE, package: str = MS_PACKAGE,
                              messages: dict[str, list[tuple]] = MS_MESSAGES) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto equivalent to `proto/mindspore_summary.proto`."""
    file_proto = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto2")
    for path in sorted(messages, key=lambda path: path.count(".")):  # outer messages first
        _add_message(file_proto, path, messages[path])
    return file_proto


def _with_raw_buckets(messages: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """The same schema with histogram buckets left as their serialized bytes (same wire format),
    and tags as bytes: proto2 strings are not checked for UTF-8 by upb but are by the pure-python
    backend, so as bytes a damaged tag reads the same under both (the decoder makes it text)."""
    raw = dict(messages)
    raw["Summary.Value"] = [
        ("tag", 1, _REQUIRED, _F.TYPE_BYTES, None, False) if field[0] == "tag" else field
        for field in messages["Summary.Value"]
    ]
    raw["Summary.Histogram"] = [
        ("buckets", 1, _REPEATED, _F.TYPE_BYTES, None, False) if field[0] == "buckets" else field
        for field in messages["Summary.Histogram"]
    ]
    return raw


def _tfevents_batch_descriptor() -> descriptor_pb2.FileDescriptorProto:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=TB_BATCH_FILE, package=TB_BATCH_PACKAGE, syntax="proto3",
        dependency=[event_pb2.DESCRIPTOR.name],
    )
    message = file_proto.message_type.add(name="EventBatch")
    message.field.add(name="events", number=1, label=_REPEATED, type=_F.TYPE_MESSAGE, type_name=".tensorboard.Event")
    message.field.add(name="framing_padding", number=2, label=_OPTIONAL, type=_F.TYPE_UINT64)
    message.field.add(name="skipped", number=3, label=_OPTIONAL, type=_F.TYPE_BYTES)
    return file_proto


def _register(file_proto: descriptor_pb2.FileDescriptorProto) -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(file_proto.name)
    except KeyError:
        pool.Add(file_proto)


def _message_class(full_name: str):
    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))


_register(mindspore_file_descriptor())
_register(mindspore_file_descriptor(MS_RAW_BUCKETS_FILE, MS_RAW_BUCKETS_PACKAGE, _with_raw_buckets(MS_MESSAGES)))
_register(_tfevents_batch_descriptor())

MsEvent = _message_class(f"{MS_PACKAGE}.Event")  # the faithful schema: for writing and checks
MsBucket = _message_class(f"{MS_PACKAGE}.Summary.Histogram.bucket")
# What the reader parses: buckets stay bytes, decoded for a whole batch at once with numpy.
MsEventBatch = _message_class(f"{MS_RAW_BUCKETS_PACKAGE}.EventBatch")
TbEventBatch = _message_class(f"{TB_BATCH_PACKAGE}.EventBatch")
