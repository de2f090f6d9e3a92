"""Network graphs for TensorBoard's Graphs tab, from MindSpore's own graph format.

- `anf_ir_schema`: the part of MindSpore's `anf_ir.proto` that describes a compiled graph,
  built at import (no protoc, no MindSpore import).
- `mindspore_graph`: MindSpore `GraphProto` -> TensorBoard `GraphDef` (a pure function).
- `summary_graphs`: the graphs `SummaryCollector` recorded in a MindSpore summary file.
"""
