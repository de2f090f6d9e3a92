"""Benchmark cases for the gradient, weight, learning-rate, loss-scale and throughput detectors.

Two families:

* "mindspore": small MLPs trained for real on the CPU (graph mode, ~200 steps, a few seconds
  each), logging the loss, learning rate, global and per-parameter gradient norms:
  - vanishing gradients: deep stacks of sigmoids (8-12 layers; each layer shrinks the gradient by
    at least 4x), label: the first logged step;
  - exploding gradients: deep ReLU stacks without normalisation whose learning rate jumps to a
    value too high for them at a known step, label: the first step trained at that rate (plus the
    loss kinds the run really shows: `nonfinite` at its first NaN loss, `divergence` at the jump,
    and `lr_schedule` for the leap of the logged rate itself);
  - benign traps: healthy ReLU stacks (layers with naturally different norms), shallow sigmoid
    nets, and unnormalised inputs whose gradient norms start 100-1000x above where they settle.
  MindSpore is imported only in a subprocess (`python -m bench.detection.cases_signals train`),
  which trains every MindSpore case of a split once: MindSpore's protobuf modules cannot be
  loaded next to TensorBoard's in one process, and the trainings write `rank_0/` and
  `akg_kernel_meta/` into their working directory, here a scratch folder.
* "synthetic": numpy-simulated series with faults at known steps (layer-depth faults put the
  first layer 10^5-10^8 away from the last; global-norm faults grow 10^2.5-10^8 or collapse
  10^3.5-10^8 or to zero), and the benign traps the detectors must stay quiet on (healthy depth
  profiles up to 10^1.5 either way plus +-10^1.2 per-layer scatter): loss-scale saw-tooth, early large norms, layers with naturally
  different norms, warm-up + cosine/linear/step/WSD/inverse-sqrt/constant schedules, a correctly
  restored resume, slowly rising gradient norms, periodic evaluation pauses in step times,
  rank sets that are fast and healthy.

"dev" and "holdout" use different seeds, depths, lengths and logging intervals.

`python -m bench.detection.cases_signals compare dev holdout+ms` puts tb-health next to the
fixed-threshold gradient monitors of tutorials (norm > 100, norm < 1e-4) on the gradient runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import cache, partial
from pathlib import Path

import numpy as np

from bench.detection import zoo_labels
from bench.detection.case import Case
from bench.detection.events import write_scalars

REPO = Path(__file__).resolve().parents[2]
MS_STEPS = 200
MS_WIDTH = 32

# ---------------------------------------------------------------------------------------------
# MindSpore family


def ms_specs(split: str) -> list[dict]:
    """The MindSpore trainings of a split: one dict of plain numbers per run."""
    base = 100 if split == "dev" else 500
    specs = []
    depths_v = (8, 10, 12, 9) if split == "dev" else (11, 8, 10, 12)
    for i, depth in enumerate(depths_v):
        specs.append(
            dict(
                name=f"ms_{split}_vanishing_{i}",
                scenario="vanishing",
                seed=base + i,
                depth=depth,
                act="sigmoid",
                sigma=(0.1, 0.2, 0.15, 0.1)[i],
                lr=0.1,
                lr_high=0.1,
                jump=MS_STEPS,
                input_scale=1.0,
                log_every=1 + i % 2,
            )
        )
    for i, depth in enumerate((6, 8, 6, 7) if split == "dev" else (7, 6, 8, 6)):
        jump = (90, 120, 140, 100)[i] if split == "dev" else (110, 80, 130, 95)[i]
        specs.append(
            dict(
                name=f"ms_{split}_exploding_{i}",
                scenario="exploding",
                seed=base + 10 + i,
                depth=depth,
                act="relu",
                sigma=0.25,
                lr=0.01,
                lr_high=(0.3, 0.4, 0.5, 0.35)[i],
                jump=jump,
                input_scale=1.0,
                log_every=1 + i % 2,
            )
        )
    healthy = [
        dict(depth=6, act="relu", sigma=0.25, lr=0.02, input_scale=1.0),
        dict(depth=3, act="sigmoid", sigma=0.3, lr=0.1, input_scale=1.0),
        dict(depth=4, act="relu", sigma=0.25, lr=0.001, input_scale=10.0),
        dict(depth=5, act="tanh", sigma=0.2, lr=0.02, input_scale=1.0),
    ]
    for i, h in enumerate(healthy):
        specs.append(
            dict(
                name=f"ms_{split}_healthy_{i}",
                scenario="healthy",
                seed=base + 20 + i,
                lr_high=h["lr"],
                jump=MS_STEPS,
                log_every=1 + i % 2,
                **h,
            )
        )
    return specs


def _train(spec: dict) -> dict:
    """Train one spec with MindSpore (call only in the training subprocess)."""
    import mindspore as ms
    from mindspore import Tensor, nn, ops
    from mindspore.common.initializer import Normal

    ms.set_seed(spec["seed"])
    rng = np.random.default_rng(spec["seed"])
    activation = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[spec["act"]]

    class DeepMLP(nn.Cell):
        def __init__(self):
            super().__init__()
            cells = []
            for i in range(spec["depth"]):
                cells += [
                    nn.Dense(MS_WIDTH if i else 16, MS_WIDTH, weight_init=Normal(spec["sigma"])),
                    activation(),
                ]
            self.layers = nn.SequentialCell(cells)
            self.head = nn.Dense(MS_WIDTH, 1, weight_init=Normal(spec["sigma"]))

        def construct(self, x):
            return self.head(self.layers(x))

    net = DeepMLP()
    total = spec.get("steps", MS_STEPS)
    schedule = [spec["lr"]] * spec["jump"] + [spec["lr_high"]] * (total - spec["jump"])
    optimizer = nn.SGD(net.trainable_params(), learning_rate=[float(v) for v in schedule])
    loss_fn = nn.MSELoss()

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        norms = tuple(ops.sqrt(ops.reduce_sum(ops.square(g))) for g in grads)
        optimizer(grads)
        return loss, norms

    x_all = (rng.normal(size=(512, 16)) * spec["input_scale"]).astype(np.float32)
    w_true = rng.normal(size=(16, 1)).astype(np.float32)
    y_all = np.sin(x_all @ w_true / (4.0 * spec["input_scale"])).astype(np.float32)
    names = [p.name for p in optimizer.parameters]
    losses, norms = [], []
    for _ in range(total):
        idx = rng.integers(0, 512, 64)
        loss, grad_norms = train_step(Tensor(x_all[idx]), Tensor(y_all[idx]))
        losses.append(float(loss))
        norms.append([float(n) for n in grad_norms])
    return {"names": names, "loss": losses, "norms": norms, "lr": schedule}


def _train_all(specs: list[dict], out: Path) -> None:
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    for spec in specs:
        (out / f"{spec['name']}.json").write_text(json.dumps(_train(spec)))


def train_specs(specs: list[dict]) -> dict[str, dict]:
    """Train these specs with MindSpore in a subprocess run from a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="tbh-ms-cases-") as scratch:
        spec_file = Path(scratch) / "specs.json"
        spec_file.write_text(json.dumps(specs))
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"  # what MindSpore sets at import
        done = subprocess.run(
            [sys.executable, "-m", "bench.detection.cases_signals", "train", str(spec_file), scratch],
            cwd=scratch,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"MindSpore training failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return {s["name"]: json.loads((Path(scratch) / f"{s['name']}.json").read_text()) for s in specs}


@cache
def trained(split: str) -> dict[str, dict]:
    """Every MindSpore case of a split, trained once per process."""
    return train_specs(ms_specs(split))


def _ms_series(spec: dict, result: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    every = spec["log_every"]
    steps = np.arange(0, spec.get("steps", MS_STEPS), every)
    norms = np.asarray(result["norms"], dtype=np.float64)[steps]
    with np.errstate(over="ignore", invalid="ignore"):
        global_norm = np.sqrt(np.sum(norms**2, axis=1))
    series = {
        "train/loss": (steps, np.asarray(result["loss"])[steps]),
        "train/lr": (steps, np.asarray(result["lr"])[steps]),
        "train/grad_norm": (steps, global_norm),
    }
    for column, name in enumerate(result["names"]):
        series[f"grad_norm/{name}"] = (steps, norms[:, column])
    return series


def ms_labels(spec: dict, series: dict) -> dict[str, list[int]]:
    """Ground truth from the design and from facts of the logged run (a NaN loss is a NaN loss,
    a loss that did not move is stalled, by the zoo's objective rule)."""
    if spec["scenario"] == "vanishing":
        labels = {"vanishing_gradients": [0]}
        if series:  # a loss that vanishing gradients left where it was is stalled too: the zoo's rule 5
            steps, loss = series["train/loss"]
            if zoo_labels.stalled_run(np.asarray(loss, dtype=np.float64), np.asarray(series["train/lr"][1])):
                labels["stalled_convergence"] = [int(steps[0])]
        return labels
    if spec["scenario"] != "exploding":
        return {}
    steps, loss = series["train/loss"]
    # the first gradient computed after an update at the high rate
    labels = {"exploding_gradients": [int(steps[np.searchsorted(steps, spec["jump"] + 1)])]}
    bad = ~np.isfinite(loss)
    if bad.any():
        labels["nonfinite"] = [int(steps[np.argmax(bad)])]
    labels["divergence"] = labels["exploding_gradients"]
    # the logged rate leaps 30-50x in one step after sitting still: a schedule fault in itself
    labels["lr_schedule"] = [int(steps[np.searchsorted(steps, spec["jump"])])]
    return labels


def _write_ms(split: str, spec: dict, folder: Path) -> None:
    write_scalars(folder, _ms_series(spec, trained(split)[spec["name"]]))


def mindspore_cases(split: str) -> list[Case]:
    out = []
    for spec in ms_specs(split):
        trained_labels = spec["scenario"] in ("exploding", "vanishing")
        expected = _TrainedLabels(split, spec) if trained_labels else ms_labels(spec, {})
        out.append(
            Case(
                name=spec["name"],
                write=partial(_write_ms, split, spec),
                expected=expected,
                family="mindspore",
            )
        )
    return out


class _TrainedLabels(dict):
    """Labels that need the trained run (did the loss really reach NaN?): computed on first use,
    so that collecting the cases does not train when the MindSpore family is filtered out."""

    def __init__(self, split: str, spec: dict):
        super().__init__()
        self._split, self._spec, self._ready = split, spec, False

    def _fill(self) -> None:
        if not self._ready:
            self._ready = True
            self.update(
                ms_labels(self._spec, _ms_series(self._spec, trained(self._split)[self._spec["name"]]))
            )

    def __contains__(self, key) -> bool:
        self._fill()
        return super().__contains__(key)

    def __getitem__(self, key):
        self._fill()
        return super().__getitem__(key)

    def __iter__(self):
        self._fill()
        return super().__iter__()

    def __len__(self) -> int:
        self._fill()
        return super().__len__()

    def get(self, key, default=None):
        self._fill()
        return super().get(key, default)

    def keys(self):
        self._fill()
        return super().keys()

    def items(self):
        self._fill()
        return super().items()


# ---------------------------------------------------------------------------------------------
# Synthetic family

SPLIT_SEEDS = {"dev": 3100, "holdout": 7700}
COUNTS = {
    "dev": {
        "grad_healthy": 14,
        "grad_exploding": 8,
        "grad_vanishing": 8,
        "depth_healthy": 8,
        "depth_vanishing": 6,
        "depth_exploding": 3,
        "hist_healthy": 3,
        "hist_vanishing": 3,
        "lr_healthy": 14,
        "lr_reset": 3,
        "lr_jump": 3,
        "lr_zero": 3,
        "lr_fast": 4,
        "scale_healthy": 10,
        "scale_storm": 3,
        "scale_decline": 3,
        "scale_collapse": 3,
        "time_healthy": 10,
        "time_step": 5,
        "time_gradual": 3,
        "weights_healthy": 6,
        "weights_stopped": 3,
        "weights_large": 2,
        "weights_drift": 3,
        "weights_saturation": 2,
        "grad_converging": 4,
        "lr_plateau": 3,
        "lr_sgdr": 3,
        "time_speedup": 3,
        "layer_dead": 4,
        "layer_healthy": 4,
    },
    "holdout": {
        "grad_healthy": 16,
        "grad_exploding": 8,
        "grad_vanishing": 8,
        "depth_healthy": 8,
        "depth_vanishing": 6,
        "depth_exploding": 3,
        "hist_healthy": 3,
        "hist_vanishing": 3,
        "lr_healthy": 16,
        "lr_reset": 3,
        "lr_jump": 3,
        "lr_zero": 3,
        "lr_fast": 4,
        "scale_healthy": 12,
        "scale_storm": 3,
        "scale_decline": 3,
        "scale_collapse": 3,
        "time_healthy": 12,
        "time_step": 5,
        "time_gradual": 3,
        "weights_healthy": 6,
        "weights_stopped": 3,
        "weights_large": 2,
        "weights_drift": 3,
        "weights_saturation": 2,
        "grad_converging": 4,
        "lr_plateau": 3,
        "lr_sgdr": 3,
        "time_speedup": 3,
        "layer_dead": 4,
        "layer_healthy": 4,
    },
}
JOBS = {
    "dev": {"ranks_healthy": 4, "ranks_straggler": 3, "ranks_loss": 2},
    "holdout": {"ranks_healthy": 4, "ranks_straggler": 3, "ranks_loss": 2},
}
FP16_MAX = 65504.0


class Synthetic:
    """One simulated run: scalar series, optional histograms and resume order, and its labels."""

    def __init__(self):
        self.scalars: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.histograms: dict[str, tuple[np.ndarray, list[np.ndarray]]] = {}
        self.expected: dict[str, list[int]] = {}
        self.order: np.ndarray | None = None  # steps in write order, when a resume repeats some

    def write(self, folder: Path) -> None:
        if self.order is None and not self.histograms:
            write_scalars(folder, self.scalars)
        else:
            write_events(folder, self.scalars, self.histograms, self.order)


def write_events(folder: Path, scalars, histograms, order=None) -> None:
    """Scalars and histograms in one event file; `order` lists the steps in write order (a
    resume writes some steps twice, the second values replacing the first)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder), max_queue_size=4096, flush_secs=3600)
    all_steps = sorted(
        {int(t) for steps, _ in scalars.values() for t in steps}
        | {int(t) for steps, _ in histograms.values() for t in steps}
    )
    sequence = list(order) if order is not None else all_steps
    scalar_rows = _rows_by_step(scalars)
    histogram_rows = _rows_by_step(histograms)
    seen: dict[int, int] = {}
    for position, step in enumerate(sequence):
        occurrence = seen.get(step, 0)
        seen[step] = occurrence + 1
        values = []
        for tag, row in scalar_rows.get((step, occurrence), []):
            values.append(Summary.Value(tag=tag, simple_value=float(scalars[tag][1][row])))
        for tag, row in histogram_rows.get((step, occurrence), []):
            b = histograms[tag][1][row]
            proto = HistogramProto(
                min=float(b[0, 0]),
                max=float(b[-1, 1]),
                num=float(b[:, 2].sum()),
                bucket_limit=[float(v) for v in b[:, 1]],
                bucket=[float(v) for v in b[:, 2]],
            )
            values.append(Summary.Value(tag=tag, histo=proto))
        if values:
            writer.add_event(Event(step=int(step), wall_time=1.7e9 + position, summary=Summary(value=values)))
    writer.close()


def _rows_by_step(series) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """(step, occurrence) -> [(tag, row)]: the n-th time a step is written takes the n-th row."""
    out: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for tag, (steps, _) in series.items():
        counts: dict[int, int] = {}
        for row, step in enumerate(np.asarray(steps).tolist()):
            occurrence = counts.get(step, 0)
            counts[step] = occurrence + 1
            out.setdefault((step, occurrence), []).append((tag, row))
    return out


def _grid(rng, points=(150, 2500), intervals=(1, 5, 10, 50)) -> np.ndarray:
    n = int(rng.integers(*points))
    return np.arange(n) * int(rng.choice(intervals))


def _loss(rng, steps) -> np.ndarray:
    tau = max(1.0, steps[-1] * rng.uniform(0.02, 0.2))
    base = rng.uniform(1.5, 6.0) * (1 + steps / tau) ** (-rng.uniform(0.3, 0.7)) + rng.uniform(0.2, 1.5)
    return base * np.exp(rng.normal(0, rng.uniform(0.005, 0.03), steps.size))


def _norm_baseline(rng, n, early=True) -> np.ndarray:
    level = 10 ** rng.uniform(-1.5, 1.5) * np.exp(rng.normal(0, rng.uniform(0.1, 0.4), n))
    level *= np.linspace(1, rng.uniform(0.5, 4.0), n)  # slow drift, often upward in LLM training
    if early and rng.random() < 0.6:  # large norms right after initialisation, settling quickly
        k = max(2, int(n * rng.uniform(0.01, 0.08)))
        level[:k] *= np.geomspace(10 ** rng.uniform(1, 3), 1, k)
    for _ in range(int(rng.integers(0, 4))):  # isolated spikes
        level[rng.integers(n // 10, n)] *= rng.uniform(5, 30)
    return level


def _onset(rng, n, lo=0.3, hi=0.75) -> int:
    return int(rng.integers(int(lo * n), int(hi * n)))


def sim_grad(scenario: str, rng) -> Synthetic:
    run = Synthetic()
    steps = _grid(rng)
    n = steps.size
    g = _norm_baseline(rng, n)
    if scenario == "grad_healthy":
        run.scalars["train/loss"] = (steps, _loss(rng, steps))
    elif scenario == "grad_converging":  # memorising a small set: loss and gradient fall together
        fall = np.geomspace(1, 10 ** -rng.uniform(3, 5), n)
        run.scalars["train/loss"] = (steps, rng.uniform(1, 3) * fall * np.exp(rng.normal(0, 0.05, n)))
        g = g * fall
    elif scenario == "grad_exploding":
        k = _onset(rng, n)
        length = max(3, int(n * rng.uniform(0.03, 0.25)))
        if rng.random() < 0.3:  # a jump to a far higher level that stays
            g[k:] *= 10 ** rng.uniform(2.5, 4)
        else:
            growth = np.geomspace(1, 10 ** rng.uniform(2.5, 8), length)
            g[k : k + length] *= growth[: n - k]
            g[k + length :] *= growth[-1]
            if rng.random() < 0.5:
                g[min(n - 1, k + length) :] = np.inf if rng.random() < 0.5 else np.nan
        run.expected["exploding_gradients"] = [int(steps[k])]
        bad = ~np.isfinite(g)
        if bad.any():  # a NaN/Inf gradient norm is a `nonfinite` finding too
            run.expected["nonfinite"] = [int(steps[np.argmax(bad)])]
    else:  # grad_vanishing
        k = _onset(rng, n)
        if rng.random() < 0.3:
            g[k:] = 0.0  # dead network
        else:
            fall = max(2, int(n * rng.uniform(0.01, 0.05)))
            target = 10 ** -rng.uniform(3.5, 8)
            g[k : k + fall] *= np.geomspace(1, target, fall)[: n - k]
            g[k + fall :] *= target
        run.expected["vanishing_gradients"] = [int(steps[k])]
    run.scalars[str(rng.choice(["train/grad_norm", "grad-norm", "global_norm"]))] = (steps, g)
    return run


def _layer_names(rng, layers: int) -> tuple[list[str], str]:
    style = int(rng.integers(3))
    if style == 0:
        names = [
            f"model.layers.{i}.{p}"
            for i in range(layers)
            for p in ("attention.wq.weight", "feed_forward.w1.weight")
        ]
        extra = ["model.tok_embeddings.embedding_weight", "lm_head.weight"]
    elif style == 1:
        names = [f"backbone.blocks.{i}.{p}" for i in range(layers) for p in ("conv.weight", "bn.gamma")]
        extra = ["backbone.stem.weight", "classifier.weight"]
    else:
        names = [f"fc{i}.weight" for i in range(layers)] + [f"fc{i}.bias" for i in range(layers)]
        extra = []
    prefix = "grad_norm/" if rng.random() < 0.6 else "local_norm/"
    return names + extra, prefix


def _depth_norms(rng, scenario, steps, layers, names) -> dict[str, np.ndarray]:
    n = steps.size
    from tb_health_plugin.analysis.detectors.layer_depth import layer_index

    per_layer = np.clip(rng.normal(0, 0.5, layers), -1.2, 1.2)  # natural differences, in decades
    # healthy networks: early layers up to 30x below or above the late ones
    profile = np.linspace(rng.uniform(-1.5, 1.5), 0, layers)
    onset = 0
    if scenario == "vanishing":
        profile = -np.linspace(rng.uniform(5, 8), 0, layers)
        onset = 0 if rng.random() < 0.5 else _onset(rng, n)
    elif scenario == "exploding":
        profile = np.linspace(rng.uniform(5, 7), 0, layers)
    base = _norm_baseline(rng, n)
    out = {}
    for name in names:
        depth = layer_index(name)
        offset = rng.uniform(-3, 1.5) if depth is None else per_layer[depth]
        values = base * 10 ** (offset + rng.normal(0, 0.15, n))
        if depth is not None:
            values[onset:] *= 10 ** profile[depth]
        out[name] = values
    return out, onset


def sim_depth(scenario: str, rng, histograms=False) -> Synthetic:
    run = Synthetic()
    steps = _grid(rng, points=(100, 800))
    layers = int(rng.integers(6, 25))
    names, prefix = _layer_names(rng, layers)
    kind = scenario.split("_")[1]
    norms, onset = _depth_norms(rng, kind, steps, layers, names)
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    if histograms:
        hist_steps = steps[:: max(1, steps.size // 60)]
        rows = np.searchsorted(steps, hist_steps)
        for name, values in norms.items():
            size = 256
            run.histograms[f"grad/{name}"] = (
                hist_steps,
                [_normal_histogram(rng, values[r] / np.sqrt(size), size) for r in rows],
            )
        onset = int(np.searchsorted(hist_steps, steps[onset]))
        label_steps = hist_steps
    else:
        for name, values in norms.items():
            run.scalars[prefix + name] = (steps, values)
        label_steps = steps
    if kind != "healthy":
        run.expected[f"{kind}_gradients"] = [int(label_steps[onset])]
    return run


def sim_layer(scenario: str, rng) -> Synthetic:
    """Per-layer norms where one layer dies (norm to zero or 10^-4..10^-7 of itself) mid-run."""
    run = Synthetic()
    steps = _grid(rng, points=(100, 800))
    layers = int(rng.integers(4, 16))
    names, prefix = _layer_names(rng, layers)
    norms, _ = _depth_norms(rng, "healthy", steps, layers, names)
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    k = _onset(rng, steps.size)
    if scenario == "layer_dead":
        from tb_health_plugin.analysis.detectors.layer_depth import layer_index

        victim = int(rng.integers(layers))
        factor = 0.0 if rng.random() < 0.4 else 10 ** -rng.uniform(4, 7)
        for name in names:
            if layer_index(name) == victim:
                norms[name][k:] *= factor
        run.expected["vanishing_gradients"] = [int(steps[k])]
    for name, values in norms.items():
        run.scalars[prefix + name] = (steps, values)
    return run


def _normal_histogram(rng, std, size, bins=30, saturate=0.0) -> np.ndarray:
    values = rng.normal(0, std, size)
    if saturate:
        bound = 2 * std
        values = np.clip(values * (1 + 4 * saturate), -bound, bound)
    counts, edges = np.histogram(values, bins=bins)
    return np.column_stack([edges[:-1], edges[1:], counts.astype(np.float64)])


def _schedule(rng, total: int, shape: str) -> np.ndarray:
    t = np.arange(total, dtype=np.float64)
    peak = 10 ** rng.uniform(-4.5, -1)
    warm = int(total * rng.choice([0, 0.01, 0.03, 0.1]))
    floor = peak * rng.choice([0.0, 0.01, 0.1])
    x = np.clip((t - warm) / max(1, total - warm), 0, 1)
    decay = {
        "cosine": floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * x)),
        "linear": floor + (peak - floor) * (1 - x),
        "step": peak
        * 0.1
        ** np.searchsorted(
            np.sort(rng.choice([0.3, 0.5, 0.6, 0.75, 0.9], 2, replace=False)), x, side="right"
        ),
        "wsd": np.where(x < 0.8, peak, floor + (peak - floor) * (1 - (x - 0.8) / 0.2)),
        "inverse_sqrt": peak / np.sqrt(1 + 20 * x),
        "constant": np.full(total, peak),
        "plateau": peak * 0.5 ** np.searchsorted(np.sort(rng.uniform(0.1, 0.95, int(rng.integers(1, 5)))), x),
        "sgdr": floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * ((x * int(rng.integers(3, 6))) % 1.0))),
    }[shape]
    lr = decay.copy()
    if warm:
        lr[:warm] = peak * (t[:warm] + 1) / warm
    return lr


def sim_lr(scenario: str, rng) -> Synthetic:
    run = Synthetic()
    total = int(rng.integers(2000, 60000))
    every = int(rng.choice([1, 10, 50, 100]))
    every = min(every, max(1, total // 150))
    shape = str(rng.choice(["cosine", "linear", "step", "wsd", "inverse_sqrt", "constant"]))
    if scenario == "lr_plateau":  # ReduceLROnPlateau: irregular halvings
        shape = "plateau"
    elif scenario == "lr_sgdr":  # cosine annealing with warm restarts
        shape = "sgdr"
    if scenario in ("lr_zero", "lr_fast") and shape == "constant":
        shape = "cosine"
    lr = _schedule(rng, total, shape)
    steps = np.arange(0, total, every)
    tag = str(rng.choice(["train/lr", "learning-rate", "lr"]))
    expected_step = None
    if scenario == "lr_fast":  # scheduler stepped per micro-batch: the schedule runs k times too fast
        k = int(rng.choice([4, 8, 16]))
        fast = _schedule(np.random.default_rng(int(rng.integers(1e9))), total, shape)
        lr = np.concatenate([fast[::k], np.full(total - len(fast[::k]), fast[-1])])[:total]
        expected_step = int(steps[np.searchsorted(steps, total // k)])
        if shape == "step":
            lr = np.maximum(lr, 0)
    if scenario == "lr_zero":
        k = int(total * rng.uniform(0.2, 0.6))
        lr[k:] = 0.0
        expected_step = int(steps[np.searchsorted(steps, k)])
    if scenario == "lr_jump":
        warm_end = int(np.argmax(lr))
        k = int(rng.integers(max(warm_end + total // 10, total // 5), int(total * 0.8)))
        lr[k:] *= rng.uniform(2, 10)
        expected_step = int(steps[np.searchsorted(steps, k)])
    values = lr[steps]
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    if scenario in ("lr_reset", "lr_healthy") and (scenario == "lr_reset" or rng.random() < 0.3):
        # a resume: steps go back to the last checkpoint and are logged again
        k = int(rng.integers(steps.size // 3, 2 * steps.size // 3))
        back = int(rng.integers(1, max(2, steps.size // 20)))
        resumed = np.arange(k - back, steps.size)
        again = lr[steps[resumed]] if scenario == "lr_healthy" else _schedule_restart(lr, steps, resumed)
        run.order = np.concatenate([steps[:k], steps[resumed]])
        all_values = np.concatenate([values[:k], again])
        losses = _loss(rng, run.order)
        run.scalars = {tag: (run.order, all_values), "train/loss": (run.order, losses)}
        if scenario == "lr_reset":
            expected_step = int(steps[k - back])
    else:
        run.scalars[tag] = (steps, values)
    if scenario not in ("lr_healthy", "lr_plateau", "lr_sgdr"):
        run.expected["lr_schedule"] = [expected_step]
    return run


def _schedule_restart(lr, steps, resumed) -> np.ndarray:
    """The scheduler restarted from step 0 while the global step continued."""
    relative = steps[resumed] - steps[resumed[0]]
    return lr[np.clip(relative, 0, lr.size - 1)]


def dynamic_loss_scaler(
    scale: float, gradient_peak: np.ndarray, window: int, forced: np.ndarray | None = None,
    min_scale: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(scale, overflow flag) per step of a dynamic fp16 loss scaler, as PyTorch's GradScaler and
    MindSpore's DynamicLossScaleUpdateCell run it: a step whose scaled gradient peak
    (`scale * gradient_peak[t]`) passes fp16's maximum, or that is `forced` to, overflows and
    halves the scale (not below `min_scale`); `window` clean steps in a row double it."""
    total = gradient_peak.size
    scales, flags, clean = np.empty(total), np.zeros(total), 0
    for t in range(total):
        overflow = bool(forced is not None and forced[t]) or scale * gradient_peak[t] > FP16_MAX
        if overflow:
            scale, clean = max(min_scale, scale / 2), 0
        else:
            clean += 1
            if clean >= window:
                scale, clean = scale * 2, 0
        scales[t], flags[t] = scale, overflow
    return scales, flags


def sim_scale(scenario: str, rng) -> Synthetic:
    run = Synthetic()
    total = int(rng.integers(3000, 30000))
    window = int(rng.choice([500, 1000, 2000]))
    scale = float(2 ** rng.choice([16, 24, 32]))
    g = 10 ** rng.uniform(-3, 0)
    sigma = rng.uniform(0.2, 0.6)
    forced = np.zeros(total, dtype=bool)
    trend = np.ones(total)
    k = int(total * rng.uniform(0.3, 0.6))
    if scenario == "scale_storm":
        forced[k:] = rng.random(total - k) < rng.uniform(0.03, 0.3)
    elif scenario == "scale_decline":
        trend[k:] = 2 ** ((np.arange(total - k)) / (window * rng.uniform(0.4, 0.8)))
    elif scenario == "scale_collapse":
        forced[k:] = rng.random(total - k) < rng.uniform(0.6, 0.95)
    noise = np.exp(rng.normal(0, sigma, total))
    scales, flags = dynamic_loss_scaler(scale, g * trend * noise, window, forced)
    every = int(rng.choice([1, 10, 20, 50]))
    steps = np.arange(0, total, every)
    run.scalars[str(rng.choice(["train/loss_scale", "loss-scale"]))] = (steps, scales[steps])
    if rng.random() < 0.5:
        run.scalars["train/overflow"] = (steps, flags[steps])
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    if scenario != "scale_healthy":
        run.expected["loss_scale"] = [int(steps[np.searchsorted(steps, k)])]
    return run


def sim_time(scenario: str, rng) -> Synthetic:
    run = Synthetic()
    steps = _grid(rng, points=(200, 3000), intervals=(1, 10, 50))
    n = steps.size
    base = 10 ** rng.uniform(1.5, 3.3)
    t = base * np.exp(rng.normal(0, rng.uniform(0.02, 0.1), n)) * np.linspace(1, rng.uniform(0.95, 1.08), n)
    t[0] *= rng.uniform(10, 100)  # graph compilation
    period = int(rng.integers(20, 200))
    t[period::period] *= rng.uniform(3, 20)  # evaluation / checkpoint pauses
    k = _onset(rng, n)
    if scenario == "time_speedup":  # caches warm up, a slow neighbour job ends: faster is fine
        t[k:] /= rng.uniform(1.3, 2)
    if scenario == "time_step":
        t[k:] *= rng.uniform(1.35, 3)
    elif scenario == "time_gradual":
        t[k:] *= np.linspace(1, rng.uniform(1.6, 2.5), n - k)
    style = int(rng.integers(3))
    if style == 0:
        run.scalars["train/step_time_ms"] = (steps, t)
    elif style == 1:
        run.scalars["iteration-time"] = (steps, t / 1000)
    else:
        run.scalars["throughput"] = (steps, rng.choice([8, 32, 256]) / (t / 1000))
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    if scenario in ("time_step", "time_gradual"):
        run.expected["throughput"] = [int(steps[k])]
    return run


def sim_weights(scenario: str, rng) -> Synthetic:
    run = Synthetic()
    steps = _grid(rng, points=(100, 600), intervals=(10, 50, 100))
    n = steps.size
    layers = int(rng.integers(3, 9))
    params = [f"layers.{i}.{p}" for i in range(layers) for p in ("weight", "bias")]
    lr = _schedule(rng, int(steps[-1]) + 1, str(rng.choice(["cosine", "linear", "constant"])))[steps]
    lr_share = lr / lr.max()
    k = _onset(rng, n)
    victim = str(rng.choice([p for p in params if p.endswith("weight")]))
    with_hist = scenario == "weights_saturation" or rng.random() < 0.3
    for param in params:
        ratio = 10 ** rng.uniform(-4, -2.5) * np.maximum(lr_share, 0) * np.exp(rng.normal(0, 0.3, n))
        norm = (
            10 ** rng.uniform(-0.5, 1.5)
            * np.cumprod(1 + rng.normal(0, 1e-3, n))
            * np.linspace(1, rng.uniform(0.7, 1.5), n)
        )
        sat = np.zeros(n)
        if param == victim:
            if scenario == "weights_stopped":
                ratio[k:] = 0.0
                norm[k:] = norm[k]
            elif scenario == "weights_large":
                ratio[k:] = 10 ** rng.uniform(-0.8, 0.3) * np.exp(rng.normal(0, 0.2, n - k))
            elif scenario == "weights_drift":
                norm[k:] *= np.geomspace(1, 10 ** rng.uniform(1.3, 2.5), n - k)
            elif scenario == "weights_saturation":
                sat[k:] = 1.0
        run.scalars[f"update_ratio/{param}"] = (steps, ratio)
        run.scalars[f"weight_norm/{param}"] = (steps, norm)
        if with_hist and param.endswith("weight"):
            hist_steps = steps[:: max(1, n // 50)]
            rows = np.searchsorted(steps, hist_steps)
            run.histograms[f"weight/{param}"] = (
                hist_steps,
                [_normal_histogram(rng, norm[r] / 32, 1024, saturate=sat[r]) for r in rows],
            )
    run.scalars["train/lr"] = (steps, lr)
    run.scalars["train/loss"] = (steps, _loss(rng, steps))
    if scenario != "weights_healthy":
        kind = "weight_updates" if scenario in ("weights_stopped", "weights_large") else "weight_distribution"
        run.expected[kind] = [int(steps[k])]
    return run


SIMULATORS = {
    "grad": sim_grad,
    "depth": sim_depth,
    "hist": partial(sim_depth, histograms=True),
    "lr": sim_lr,
    "scale": sim_scale,
    "time": sim_time,
    "weights": sim_weights,
}


def simulate(scenario: str, rng) -> Synthetic:
    family = scenario.split("_")[0]
    if family == "hist":
        return sim_depth("depth_" + scenario.split("_")[1], rng, histograms=True)
    if family == "layer":
        return sim_layer(scenario, rng)
    return SIMULATORS[family](scenario, rng)


@cache
def simulate_job(split: str, scenario: str, index: int) -> dict[str, Synthetic]:
    """The ranks of one job: a shared loss curve and step time, each rank with its own noise."""
    rng = np.random.default_rng([SPLIT_SEEDS[split], 99, index, len(scenario)])
    ranks = int(rng.integers(3, 9))
    steps = _grid(rng, points=(200, 1500), intervals=(1, 10, 20))
    n = steps.size
    loss = _loss(rng, steps)
    base = 10 ** rng.uniform(1.0, 2.5)  # fast ranks: 10-300 ms a step
    odd = int(rng.integers(ranks))
    k = _onset(rng, n, 0.0, 0.5) if scenario == "ranks_loss" else 0
    out = {}
    for r in range(ranks):
        run = Synthetic()
        t = base * rng.uniform(0.97, 1.03) * np.exp(rng.normal(0, 0.04, n))
        t[0] *= 30
        rank_loss = loss * np.exp(rng.normal(0, 0.03, n))
        if r == odd and scenario == "ranks_straggler":
            t *= rng.uniform(1.35, 2.5)
            run.expected["throughput"] = [int(steps[0])]
        if r == odd and scenario == "ranks_loss":
            rank_loss[k:] *= rng.uniform(1.5, 3)
            # the rank's own loss jumps up and stays there: a divergence of that run too
            run.expected.update(throughput=[int(steps[k])], divergence=[int(steps[k])])
        run.scalars = {"train/step_time_ms": (steps, t), "train/loss": (steps, rank_loss)}
        out[f"rank_{r}"] = run
    return out


def _write_job_rank(split, scenario, index, rank, folder: Path) -> None:
    simulate_job(split, scenario, index)[rank].write(folder)


def synthetic_cases(split: str) -> list[Case]:
    out = []
    seed = SPLIT_SEEDS[split]
    for number, (scenario, count) in enumerate(COUNTS[split].items()):
        for k in range(count):
            run = simulate(scenario, np.random.default_rng([seed, number, k]))
            out.append(Case(name=f"sig_{split}_{scenario}_{k:02d}", write=run.write, expected=run.expected))
    for scenario, count in JOBS[split].items():
        for k in range(count):
            for rank, run in simulate_job(split, scenario, k).items():
                out.append(
                    Case(
                        name=f"sig_{split}_{scenario}_{k:02d}/{rank}",
                        write=partial(_write_job_rank, split, scenario, k, rank),
                        expected=run.expected,
                    )
                )
    return out


def cases(split: str) -> list[Case]:
    return synthetic_cases(split) + mindspore_cases(split)


# ---------------------------------------------------------------------------------------------
# Side by side with fixed thresholds on the gradient kinds

# The fixed-threshold monitors found in tutorials and training scripts: alarm when the global
# gradient norm exceeds an upper bound (exploding) or falls under a lower one (vanishing).
NAIVE_THRESHOLDS = {"exploding_gradients": 100.0, "vanishing_gradients": 1e-4}


def naive_gradient_alarms(signals) -> set[str]:
    """Kinds a fixed-threshold monitor raises on one run (any logged point beyond the bound)."""
    from tb_health_plugin.analysis.checks.gradients import global_grad_norm, per_parameter_grad_norms

    series = global_grad_norm(signals, per_parameter_grad_norms(signals))
    if series is None:
        return set()
    values = series[1]
    kinds = set()
    if np.any(~np.isfinite(values) | (values > NAIVE_THRESHOLDS["exploding_gradients"])):
        kinds.add("exploding_gradients")
    if np.any(np.isfinite(values) & (values < NAIVE_THRESHOLDS["vanishing_gradients"])):
        kinds.add("vanishing_gradients")
    return kinds


def compare_gradients(split: str, with_mindspore: bool) -> None:
    """Run-level F1 of tb-health and of fixed thresholds on the gradient cases, one run."""
    from tb_health_plugin.analysis.engine import analyze_runs
    from tb_health_plugin.analysis.signals import RunSignals
    from tb_health_plugin.readers import read_logdir

    selected = [
        c
        for c in (synthetic_cases(split) + (mindspore_cases(split) if with_mindspore else []))
        if any(tag in c.name for tag in ("_grad_", "_depth_", "_hist_", "_layer_", "ms_"))
    ]
    with tempfile.TemporaryDirectory(prefix="tbh-grad-compare-") as scratch:
        for case in selected:
            case.write(Path(scratch) / case.name)
        runs = read_logdir(scratch)
    reports = {r["run"]: r for r in analyze_runs(runs)}
    ours = {
        name: {f["kind"] for f in r["findings"] if f["severity"] in ("warning", "critical")}
        for name, r in reports.items()
    }
    naive = {run.name: naive_gradient_alarms(RunSignals.from_run(run)) for run in runs}
    print(f"split {split}: {len(selected)} gradient runs, {sum(c.healthy for c in selected)} healthy")
    print(f"{'kind':<22}{'tool':<18}{'prec':>7}{'recall':>8}{'F1':>7}")
    for kind in ("exploding_gradients", "vanishing_gradients"):
        for tool, found in (("tb-health", ours), ("fixed threshold", naive)):
            tp = sum(kind in c.expected and kind in found.get(c.name, ()) for c in selected)
            fp = sum(kind not in c.expected and kind in found.get(c.name, ()) for c in selected)
            fn = sum(kind in c.expected and kind not in found.get(c.name, ()) for c in selected)
            precision = tp / (tp + fp) if tp + fp else float("nan")
            recall = tp / (tp + fn) if tp + fn else float("nan")
            f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
            print(f"{kind:<22}{tool:<18}{precision:>7.3f}{recall:>8.3f}{f1:>7.3f}")
    for tool, found in (("tb-health", ours), ("fixed threshold", naive)):
        healthy = [c for c in selected if c.healthy]
        alarmed = sum(bool(found.get(c.name, set()) & set(NAIVE_THRESHOLDS)) for c in healthy)
        print(f"healthy runs with a gradient alarm, {tool}: {alarmed}/{len(healthy)}")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "train":
        _train_all(json.loads(Path(argv[1]).read_text()), Path(argv[2]))
        return 0
    if argv and argv[0] == "compare":
        for split in argv[1:] or ["dev", "holdout"]:
            compare_gradients(split.removesuffix("+ms"), split.endswith("+ms"))
        return 0
    print(
        "usage: python -m bench.detection.cases_signals train SPECS.json OUTDIR\n"
        "       python -m bench.detection.cases_signals compare [dev|holdout|dev+ms|holdout+ms ...]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
