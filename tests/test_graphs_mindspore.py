"""The network's graph in TensorBoard's Graphs tab, from real MindSpore CPU trainings.

A small network (Dense, a Transformer encoder block, Dense, ReLU, Dense) is trained on the CPU:
in graph mode with `SummaryCollector` (graph collected, dataset graph off) and our
`HealthMonitor(log_graph=True)` side by side, then in PyNative with the monitor alone. The
summary is converted with `tb-health convert`; one real `tensorboard` process serves everything,
and its own graph route must return, for each run, the graph MindSpore compiled (read with
MindSpore's own protobuf classes, not ours): the same nodes, op types and edges. A headless
Chromium opens the Graphs tab and a finding's link from the Health tab.
"""

from __future__ import annotations

import collections
import glob
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto.graph_pb2 import GraphDef

ms = pytest.importorskip("mindspore")
from mindspore import dataset as ds  # noqa: E402
from mindspore import nn  # noqa: E402
from mindspore.train import anf_ir_pb2, summary_pb2  # noqa: E402

from tests.browser import IFRAME, HealthTab, chromium, chromium_path, new_page  # noqa: E402
from tests.eventlogs import write_scalars  # noqa: E402
from tests.hooks_fixtures import texts  # noqa: E402
from tests.tensorboard_server import get_json, running_tensorboard  # noqa: E402
from trainer_hooks import HealthMonitor  # noqa: E402

pytestmark = pytest.mark.mindspore

STEPS = 4
LAYER_SCOPES = ["layers-CellList/0-Dense", "layers-CellList/1-TransformerEncoderLayer", "layers-CellList/2-Dense",
                "layers-CellList/3-Dense"]
GRAPH_RUN, PYNATIVE_RUN, CONVERTED_RUN = "graph/rank_0", "pynative/rank_0", "converted"


class GraphNet(nn.Cell):
    """Four layers, the second a Transformer encoder block; `layers.<i>` names carry the depth."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.CellList([
            nn.Dense(8, 16),
            nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True),
            nn.Dense(16, 16),
            nn.Dense(16, 4),
        ])
        self.act = nn.ReLU()

    def construct(self, x):
        hidden = self.layers[1](self.layers[0](x))
        return self.layers[3](self.act(self.layers[2](hidden))).mean(1)


def dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8 * STEPS, 4, 8)).astype(np.float32)
    y = rng.integers(0, 4, 8 * STEPS).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)


def train(mode, callbacks) -> tuple[nn.Cell, ms.Model]:
    ms.set_context(mode=mode)
    ms.set_seed(0)
    net = GraphNet()
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.Adam(net.trainable_params(), 1e-3))
    model.train(1, dataset(), callbacks=callbacks, dataset_sink_mode=False)
    return net, model


def summary_graph(folder) -> anf_ir_pb2.GraphProto:
    """The graph SummaryCollector wrote, read with MindSpore's own summary schema."""
    from tb_health_plugin.readers.records import scan_records

    (path,) = glob.glob(os.path.join(folder, "*_MS"))
    data = open(path, "rb").read()
    scan = scan_records(data)
    for start, length in zip(scan.starts.tolist(), scan.lengths.tolist(), strict=True):
        event = summary_pb2.Event.FromString(data[start : start + length])
        if event.HasField("graph_def"):
            return event.graph_def
    raise AssertionError("SummaryCollector wrote no graph")


def model_graph(cell) -> anf_ir_pb2.GraphProto:
    return anf_ir_pb2.ModelProto.FromString(cell.get_func_graph_proto()).graph


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph-logs")
    scratch = tmp_path_factory.mktemp("graph-cwd")
    previous = os.getcwd()
    os.chdir(scratch)  # MindSpore writes rank_0/ and kernel folders into the cwd
    try:
        collector = ms.SummaryCollector(
            str(root / "summary"), collect_freq=1,
            collect_specified_data={"collect_graph": True, "collect_dataset_graph": False},
        )
        monitor = HealthMonitor(str(root / "graph"), 1, log_graph=True, online_analysis=False)
        net, model = train(ms.GRAPH_MODE, [collector, monitor])
        graph_reference = model_graph(model.train_network)
        parameters = {p.name: tuple(p.shape) for p in net.trainable_params()}
        pynative_net, pynative_model = train(
            ms.PYNATIVE_MODE, [HealthMonitor(str(root / "pynative"), 1, log_graph=True, online_analysis=False)]
        )
        pynative_reference = model_graph(pynative_model.train_network.network)  # compiled by the monitor
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
        os.chdir(previous)
    summary_reference = summary_graph(root / "summary")
    result = subprocess.run(
        [sys.executable, "-m", "tb_health_plugin.cli", "convert", str(root / "summary"), str(root / CONVERTED_RUN)],
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"},
    )
    assert result.returncode == 0, result.stderr
    assert "1 network graph" in result.stdout
    return {
        "root": root, "parameters": parameters,
        "references": {CONVERTED_RUN: summary_reference, GRAPH_RUN: graph_reference, PYNATIVE_RUN: pynative_reference},
        "pynative_parameters": {p.name for p in pynative_net.trainable_params()},
    }


@pytest.fixture(scope="module")
def tensorboard(trained):
    with running_tensorboard(trained["root"]) as base:
        yield base


def served_graph(base: str, run: str) -> GraphDef:
    """The graph TensorBoard's own graph route serves for a run (waits for TensorBoard to load it)."""
    import time

    deadline = time.monotonic() + 120
    while run not in get_json(base + "/data/plugin/graphs/info"):
        assert time.monotonic() < deadline, f"TensorBoard lists no graph for {run}"
        time.sleep(0.5)
    url = f"{base}/data/plugin/graphs/graph?{urllib.parse.urlencode({'run': run})}"
    with urllib.request.urlopen(url, timeout=60) as response:
        return text_format.Parse(response.read().decode("utf-8"), GraphDef())


def node_key(node) -> str:
    """Names a node as MindSpore does: an operator by its scope name, a parameter by its name."""
    return node.name.rsplit("/", 1)[-1] if node.op == "Parameter" else node.name


def expected_structure(reference) -> tuple[collections.Counter, set]:
    """(op type counts, edges) of a MindSpore graph: every operator and parameter is a node;
    every input from an operator or parameter is an edge (constants are attributes)."""
    names = {node.name: node.full_name for node in reference.node}
    names.update({parameter.name: parameter.name for parameter in reference.parameters})
    ops = collections.Counter(node.op_type for node in reference.node)
    ops["Parameter"] = len(reference.parameters)
    edges = {
        (names[edge.name], node.full_name, edge.type == anf_ir_pb2.InputProto.CONTROL_EDGE)
        for node in reference.node for edge in node.input if edge.name in names
    }
    return ops, edges


def served_structure(graph: GraphDef) -> tuple[collections.Counter, set]:
    keys = {node.name: node_key(node) for node in graph.node}
    edges = {
        (keys[source.lstrip("^")], node_key(node), source.startswith("^")) for node in graph.node for source in node.input
    }
    return collections.Counter(node.op for node in graph.node), edges


@pytest.mark.parametrize("run", [CONVERTED_RUN, GRAPH_RUN, PYNATIVE_RUN])
def test_tensorboard_serves_the_graph_mindspore_compiled(trained, tensorboard, run):
    reference = trained["references"][run]
    graph = served_graph(tensorboard, run)
    ops, edges = expected_structure(reference)
    served_ops, served_edges = served_structure(graph)
    assert len(graph.node) == len(reference.node) + len(reference.parameters)
    assert served_ops == ops
    assert served_edges == edges
    assert len({node.name for node in graph.node}) == len(graph.node)
    # the network is in it: its layers' operators, attention and normalisation included
    for scope in LAYER_SCOPES:
        assert any(f"/{scope}/" in node.name for node in graph.node if node.op != "Parameter"), scope
    assert {"Softmax", "LayerNorm", "ReLU"} <= set(served_ops)
    assert all(node.name.startswith(("Default/", "Gradients/")) or node.op == "Parameter" for node in graph.node)


@pytest.mark.parametrize("run", [CONVERTED_RUN, GRAPH_RUN])
def test_weights_sit_in_their_layers_scope_with_shape_and_dtype(trained, tensorboard, run):
    nodes = {node_key(node): node for node in served_graph(tensorboard, run).node if node.op == "Parameter"}
    for name, shape in trained["parameters"].items():
        node = nodes[name]
        layer = LAYER_SCOPES[int(name.split(".")[1])]
        assert f"/{layer}/" in node.name, node.name
        (served_shape,) = node.attr["_output_shapes"].list.shape
        assert tuple(d.size for d in served_shape.dim) == shape
        assert node.attr["_ms_type"].s == b"Tensor[Float32]"
    operators = [node for node in served_graph(tensorboard, run).node if node.op == "MatMul"]
    assert operators and all(node.attr["_output_shapes"].list.shape for node in operators)


def test_pynative_graph_has_the_networks_parameters_and_says_what_it_cost(trained, tensorboard):
    nodes = {node_key(node) for node in served_graph(tensorboard, PYNATIVE_RUN).node if node.op == "Parameter"}
    assert trained["pynative_parameters"] <= nodes
    notes = " ".join(text for _, text in texts(trained["root"] / "pynative" / "rank_0", "health/notes"))
    assert "compiled once in graph mode" in notes


def write_vanishing_gradients(run_dir, parameters) -> str:
    """Per-parameter gradient norms as the hooks log them, the first layers 10^4.5 below the last:
    the analysis reports vanishing gradients naming a parameter of the first layer."""
    steps = np.arange(1, 201)
    rng = np.random.default_rng(0)
    series = {
        f"grad_norm/{name}": (steps, 10.0 ** (1.5 * int(name.split(".")[1]) - 5) * (1 + 0.1 * rng.random(steps.size)))
        for name in parameters
    }
    write_scalars(run_dir, series)
    return "layers.0."


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_graphs_tab_shows_the_layers_and_a_finding_selects_its_parameter(trained, tensorboard):
    first_layer = write_vanishing_gradients(trained["root"] / "graph" / "rank_0", trained["parameters"])
    base = tensorboard
    with chromium() as browser, new_page(browser) as page:
        served_graph(base, GRAPH_RUN)
        tab = HealthTab(page, base).open()
        tab.frame.locator(f"tr.run-row[data-run='{GRAPH_RUN}'] a.run-link").click()
        link = tab.frame.locator("li.finding[data-kind='vanishing_gradients'] a.graph-link")
        link.wait_for(state="visible", timeout=120_000)
        parameter = link.get_attribute("data-parameter")
        assert parameter.startswith(first_layer)
        assert link.get_attribute("href").endswith(f"#graphs&run={urllib.parse.quote(GRAPH_RUN, safe='')}")
        link.click()
        page.wait_for_function("() => document.body.dataset.tbHealthGraphNode", timeout=120_000)
        run, node = page.evaluate("() => document.body.dataset.tbHealthGraphNode").split("\n")
        assert run == GRAPH_RUN
        assert node.endswith(f"/{LAYER_SCOPES[0]}/{parameter}")
        # the Graphs tab shows this run's graph (not the first run's), with the node selected
        assert page.evaluate(LOADED_RUN) == GRAPH_RUN
        assert page.evaluate(SELECTED_NODE) == node
        assert page.evaluate("() => location.hash.startsWith('#graphs')")
        drawn = page.evaluate(DRAWN_LABELS)
        # the selection expanded the scopes down to the first layer; its siblings show by name
        for label in ("layers-CellList", "0-Dense", "1-TransformerEncoderLayer", "3-Dense"):
            assert any(text.startswith(label[:10]) for text in drawn), (label, drawn)
        tab.screenshot("graph-link-selected")
        # the converted SummaryCollector run opens by URL on its two top scopes
        page.goto(f"{base}/#graphs&run={CONVERTED_RUN}")
        page.reload()
        page.wait_for_function(f"() => ({LOADED_RUN})() === '{CONVERTED_RUN}'", timeout=120_000)
        page.wait_for_function(
            f"() => {{ const labels = ({DRAWN_LABELS})(); return labels.includes('Default') && labels.includes('Gradients'); }}",
            timeout=60_000,
        )
        assert not page.locator(IFRAME).count()  # the Graphs tab, not the Health tab


DEEP = (
    "const deep = (selector) => { const pending = [document]; while (pending.length) { const root = pending.pop();"
    " const hit = root.querySelector(selector); if (hit) return hit;"
    " for (const el of root.querySelectorAll('*')) if (el.shadowRoot) pending.push(el.shadowRoot); } return null; };"
)
DRAWN_LABELS = (
    "() => { const texts = []; const pending = [document]; while (pending.length) { const root = pending.pop();"
    " for (const t of root.querySelectorAll('svg text')) { const first = t.childNodes[0];"
    " texts.push((first && first.nodeType === 3 ? first.nodeValue : t.textContent).trim()); }"
    " for (const el of root.querySelectorAll('*')) if (el.shadowRoot) pending.push(el.shadowRoot); } return texts; }"
)
SELECTED_NODE = f"() => {{ {DEEP} return deep('tf-graph-board').selectedNode; }}"
LOADED_RUN = f"() => {{ {DEEP} const loader = deep('tf-graph-dashboard-loader'); return loader && loader._graphRunTag && loader._graphRunTag.run; }}"


def test_compiling_for_the_graph_in_pynative_leaves_the_training_unchanged(tmp_path, monkeypatch):
    """The PyNative graph comes from a graph-mode compilation of the loss cell at step 1: the
    training after it must be the one without it, loss for loss, and no logged step time may
    include that compilation."""
    from mindspore.train.callback import Callback

    class Losses(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.values: list[float] = []

        def on_train_step_end(self, run_context):
            self.values.append(float(run_context.original_args().net_outputs.asnumpy()))

    from trainer_hooks import HealthLogger

    clock_started: list[bool] = []  # whether the step clock was running when the graph was logged
    log_graph = HealthLogger.log_graph
    monkeypatch.setattr(HealthLogger, "log_graph",
                        lambda self, graph: clock_started.append(self.clock.running) or log_graph(self, graph))
    monkeypatch.chdir(tmp_path)
    runs = {}
    try:
        for log_graph in (False, True):
            losses = Losses()
            monitor = HealthMonitor(str(tmp_path / str(log_graph)), 1, log_graph=log_graph, online_analysis=False)
            train(ms.PYNATIVE_MODE, [losses, monitor])
            runs[log_graph] = losses.values
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
    assert len(runs[True]) == STEPS
    assert runs[True] == runs[False]
    notes = " ".join(text for _, text in texts(tmp_path / "True" / "rank_0", "health/notes"))
    assert "compiled once in graph mode" in notes
    # the one-off compilation happens before the step clock starts: no step time includes it
    assert clock_started == [False]
