"""The zoo: real MindSpore CPU trainings with randomised settings, labelled by what happened.

Each run draws (from its split's seed) an architecture (MLP of 1-6 layers, a one-convolution
CNN, or a 1-2 block Transformer encoder), width, activation (ReLU, tanh, sigmoid, GELU),
optimiser (SGD, Momentum, Adam, AdamW), a learning rate log-uniform over a range that runs from
far too low to far too high for that optimiser, batch size, schedule (constant, warm-up +
cosine, step decay), precision (float32, float16, float16 with a static loss scale), input scale,
a logging path (see `zoo_training`) with its logging interval, and for some runs corrupted
batches at random steps. MLPs train for 200-500 steps, the others 200; every split also holds
`LONG_SIZES` long runs of 1,500-4,000 steps (any architecture), drawn after the others so that
theirs stay as they were: real runs are longer, and only long runs keep enough points logged
every 50 steps for that rendering of `metamorphic`. A run is
labelled by the objective rules of `zoo_labels` applied to its raw per-step values, by what
happened: an injected corrupted batch is a spike only where its logs show it (rule 6b).

Trainings run in child processes (`zoo_training`), cached under `bench/detection/.zoo_cache/`
(gitignored; `TB_HEALTH_ZOO_CACHE` moves it) by spec and by a hash of the training code, so a
re-run only analyses. The cache keeps each step's raw loss, gradient norm, rate and step time,
from which `metamorphic` renders its variants.

Splits: "dev" (tune against it), "holdout" (another seed), "sealed" (another seed again: run
only once, by whoever integrates, never while tuning; `--split both` leaves it out), "seen" to
"seen30" (earlier sealed seeds, 89_989, 54_629, 93_936, 38_495, 51_244, 22_788, 44_444, 33_455,
63_153, 33_593, 28_166, 82_815, 52_134, 46_374, 53_515, 43_172, 29_829, 63_399, 98_269, 68_144,
17_551, 49_646, 96_136, 16_102, 18_675, 27_817, 78_736, 34_885, 33_209 and 88_592: once their figures were read, more runs to tune against).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

from bench.detection import zoo_labels
from bench.detection.case import Case

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# sealed: 37_871 is new (stop 54); 88_592 ("seen30"), 33_209 ("seen29"), 34_885 ("seen28"), 78_736 ("seen27"), 27_817 ("seen26"), 18_675 ("seen25"), 16_102 ("seen24"), 96_136 ("seen23"), 49_646 ("seen22"), 17_551 ("seen21"), 68_144 ("seen20"), 98_269 ("seen19"), 63_399 ("seen18"), 29_829 ("seen17"), 43_172 ("seen16"), 53_515 ("seen15"), 46_374 ("seen14"), 52_134 ("seen13"), 82_815 ("seen12"), 28_166 ("seen11"), 33_593 ("seen10"), 63_153 ("seen9"), 33_455 ("seen8"), 44_444 ("seen7"), 22_788 ("seen6"), 51_244 ("seen5"), 38_495 ("seen4"), 93_936 ("seen3"), 54_629 ("seen2"), 89_989 ("seen"), 14_646, 24_171, 61_591, 20_236, 64_278, 49_340, 99_392, 90_731, 73_517 and 77_739 were seen
SPLIT_SEEDS = {"dev": 20_261, "holdout": 40_427, "seen": 89_989, "seen2": 54_629, "seen3": 93_936, "seen4": 38_495, "seen5": 51_244, "seen6": 22_788, "seen7": 44_444, "seen8": 33_455, "seen9": 63_153, "seen10": 33_593, "seen11": 28_166, "seen12": 82_815, "seen13": 52_134, "seen14": 46_374, "seen15": 53_515, "seen16": 43_172, "seen17": 29_829, "seen18": 63_399, "seen19": 98_269, "seen20": 68_144, "seen21": 17_551, "seen22": 49_646, "seen23": 96_136, "seen24": 16_102, "seen25": 18_675, "seen26": 27_817, "seen27": 78_736, "seen28": 34_885, "seen29": 33_209, "seen30": 88_592, "sealed": 37_871}
SPLIT_SIZES = {"dev": 120, "holdout": 40, "seen": 120, "seen2": 120, "seen3": 120, "seen4": 120, "seen5": 120, "seen6": 120, "seen7": 120, "seen8": 120, "seen9": 120, "seen10": 120, "seen11": 120, "seen12": 120, "seen13": 120, "seen14": 120, "seen15": 120, "seen16": 120, "seen17": 120, "seen18": 120, "seen19": 120, "seen20": 120, "seen21": 120, "seen22": 120, "seen23": 120, "seen24": 120, "seen25": 120, "seen26": 120, "seen27": 120, "seen28": 120, "seen29": 120, "seen30": 120, "sealed": 120}
# Long runs after those, drawn the same way but for LONG_STEPS steps: enough points for the
# every-50-steps renderings of `metamorphic` (at 200-500 steps a run keeps 4-10 there).
LONG_SIZES = {split: 8 if split == "holdout" else 16 for split in SPLIT_SEEDS}  # a new seed gets its own
LONG_STEPS = (1500, 4000)  # log-uniform
LOGGING_PATHS = ("hooks_logger", "hooks_monitor", "custom", "mindformers", "hf", "summary_collector")
LOG_EVERY = {"hooks_logger": (1, 5, 10), "hooks_monitor": (1, 5, 10), "custom": (1, 5, 10, 20),
             "mindformers": (1, 5, 10), "hf": (5, 10, 20), "summary_collector": (1, 5, 10)}
LR_RANGES = {"sgd": (1e-4, 30.0), "momentum": (1e-5, 10.0), "adam": (1e-6, 1.0), "adamw": (1e-6, 1.0)}
WINDOW_MAX_PATHS = ("hooks_logger", "hooks_monitor")  # log every step's maximum since the last point
GRAD_NORM_PATHS = ("hooks_logger", "mindformers", "hf")  # the paths whose logs carry a global gradient norm
FAMILY = "zoo"  # every case here belongs to this family: run.py skips the module when it is filtered out
OFFERED_SPLITS = tuple(SPLIT_SEEDS)
JOBS = 1  # training processes for missing runs (run.py --jobs sets it)
LIMIT: int | None = None  # only the first LIMIT runs of each split (run.py --zoo-runs sets it)


def cache_dir() -> Path:
    return Path(os.environ.get("TB_HEALTH_ZOO_CACHE", HERE / ".zoo_cache"))


@cache
def code_version() -> str:
    """Changes when the training code changes, so stale cached runs are not reused."""
    digest = hashlib.sha1()
    for name in ("zoo_training.py",):
        digest.update((HERE / name).read_bytes())
    return digest.hexdigest()[:8]


def draw_spec(split: str, index: int) -> dict:
    rng = np.random.default_rng([SPLIT_SEEDS[split], index])
    arch = str(rng.choice(["mlp", "cnn", "transformer"], p=[0.84, 0.06, 0.10]))
    optimizer = str(rng.choice(["sgd", "momentum", "adam", "adamw"]))
    low, high = LR_RANGES[optimizer]
    logging = str(rng.choice(LOGGING_PATHS))
    spec = {
        "name": f"zoo_{split}_{index:03d}",
        "seed": int(SPLIT_SEEDS[split] * 1000 + index),
        "data_seed": int(rng.integers(0, 2**31)),
        "arch": arch,
        "depth": int(rng.integers(1, 7)) if arch == "mlp" else 1,
        "width": int(rng.choice([16, 32, 64])) if arch == "mlp" else (4 if arch == "cnn" else 16),
        "activation": str(rng.choice(["relu", "tanh", "sigmoid", "gelu"])),
        "optimizer": optimizer,
        "lr": float(np.exp(rng.uniform(np.log(low), np.log(high)))),
        "batch": int(rng.choice([8, 16, 32, 64, 128])),
        "steps": int(np.exp(rng.uniform(np.log(200), np.log(500)))) if arch == "mlp" else 200,
        "schedule": str(rng.choice(["constant", "warmup_cosine", "step_decay"])),
        "warmup_share": float(rng.uniform(0.02, 0.1)),
        "milestones": sorted(float(m) for m in rng.uniform(0.3, 0.9, int(rng.integers(1, 3)))),
        "precision": str(rng.choice(["float32", "float16", "loss_scale"], p=[0.6, 0.2, 0.2])),
        "noise": float(rng.uniform(0.8, 2.0)),
        "input_scale": float(rng.choice([1.0, 10.0], p=[0.85, 0.15])),
        "logging": logging,
        "log_every": int(rng.choice(LOG_EVERY[logging])),
    }
    if index >= SPLIT_SIZES[split]:  # a long run: its own draw, so the others' stay as they were
        long_rng = np.random.default_rng([SPLIT_SEEDS[split], index, 1])
        spec["steps"] = int(np.exp(long_rng.uniform(np.log(LONG_STEPS[0]), np.log(LONG_STEPS[1]))))
    if spec["precision"] == "loss_scale":
        spec["loss_scale"] = float(rng.choice([2.0**10, 2.0**14, 2.0**16]))
    if rng.random() < 0.2:
        count = int(rng.integers(1, 4))
        spec["corrupt_steps"] = sorted(int(s) for s in rng.integers(int(0.2 * spec["steps"]), int(0.9 * spec["steps"]), count))
        spec["corrupt_scale"] = float(rng.uniform(5, 30))
    return spec


def specs(split: str) -> list[dict]:
    """The split's runs: `SPLIT_SIZES` of 200-500 steps, then its `LONG_SIZES` long ones."""
    count = SPLIT_SIZES[split] + LONG_SIZES.get(split, 0)
    count = count if LIMIT is None else min(LIMIT, count)
    return [draw_spec(split, i) for i in range(count)]


def spec_key(spec: dict) -> str:
    return hashlib.sha1((json.dumps(spec, sort_keys=True) + code_version()).encode()).hexdigest()[:10]


def cached_stem(spec: dict) -> Path:
    return cache_dir() / f"{spec['name']}-{spec_key(spec)}"


def ensure_trained(all_specs: list[dict], jobs: int = 1) -> None:
    """Train the specs missing from the cache, in `jobs` child processes."""
    missing = [dict(s, name=cached_stem(s).name) for s in all_specs if not cached_stem(s).with_suffix(".npz").exists()]
    if not missing:
        return
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for spec in missing:  # logs of an interrupted training would be appended to
        shutil.rmtree(folder / f"{spec['name']}.logs", ignore_errors=True)
    print(f"training {len(missing)} zoo runs in {jobs} process(es), cached in {folder} ...", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"  # what MindSpore sets at import
    children = []
    with tempfile.TemporaryDirectory(prefix="tbh-zoo-specs-") as scratch:
        for job in range(jobs):
            share = missing[job::jobs]
            if not share:
                continue
            spec_file = Path(scratch) / f"specs{job}.json"
            spec_file.write_text(json.dumps(share))
            children.append(subprocess.Popen([sys.executable, "-m", "bench.detection.zoo_training", str(spec_file), str(folder)],
                                             cwd=scratch, env=env, stdout=subprocess.DEVNULL))
        codes = [child.wait() for child in children]
    if any(codes):
        raise RuntimeError(f"zoo training failed (exit codes {codes}); finished runs stay cached")


@dataclass(frozen=True)
class ZooRun:
    spec: dict
    loss: np.ndarray
    grad_norm: np.ndarray
    lr: np.ndarray
    step_time: np.ndarray
    logs: Path


def load(spec: dict) -> ZooRun:
    stem = cached_stem(spec)
    data = np.load(stem.with_suffix(".npz"))
    return ZooRun(spec, data["loss"], data["grad_norm"], data["lr"], data["step_time"], stem.with_suffix(".logs"))


STEP_ONE_PATHS = ("hooks_logger", "hooks_monitor", "summary_collector")  # also log step 1, the untrained loss


def logged_steps(spec: dict) -> np.ndarray:
    every = spec["log_every"]
    steps = np.arange(every, spec["steps"] + 1, every)
    return np.concatenate(([1], steps)) if spec["logging"] in STEP_ONE_PATHS and every > 1 else steps


def visibility(logged: np.ndarray, window_max: bool, points: bool, loss: np.ndarray | None = None):
    """`visible_step(k, persistent, nonfinite)` for `zoo_labels.label_run`: a one-step event shows
    in points logged at its own step and in a logged window maximum (or count). In interval
    means it shows when it lifts its window's mean at least `zoo_labels.SPIKE_MEAN_LIFT` above
    the median of the `zoo_labels.SPIKE_MEAN_CONTEXT` means before it (`loss`: the per-step
    values the means are taken of; `logged` is every `logged[0]`-th step, as every zoo log is),
    and a NaN or Inf always shows: it makes its window's mean non-finite."""
    means = None if points or window_max or loss is None else interval_means(loss, int(logged[0]))

    def visible_step(k: int, persistent: bool = True, nonfinite: bool = False) -> int | None:
        step = k + 1
        index = int(np.searchsorted(logged, step))
        if index >= logged.size:
            index = logged.size - 1
        if nonfinite and not points:  # a NaN or Inf in a window makes its mean non-finite
            return int(logged[index])
        if persistent or window_max or (points and int(logged[index]) == step):
            return int(logged[index])
        if means is not None and zoo_labels.lifts_mean(means, index):
            return int(logged[index])
        return None

    return visible_step


def interval_means(loss: np.ndarray, interval: int) -> np.ndarray:
    """The mean of the per-step loss over each whole window of `interval` steps (the points a
    Hugging Face-style trainer logs at steps `interval`, 2 `interval`, ...; a NaN or Inf makes
    its window's mean non-finite)."""
    points = loss.size // interval
    with np.errstate(invalid="ignore"):
        return loss[: points * interval].reshape(points, interval).mean(axis=1)


def labels_for(run: ZooRun) -> tuple[dict[str, list[int]], bool]:
    """Labels of the run as logged by its own logging path."""
    spec = run.spec
    points = spec["logging"] != "hf" or spec["log_every"] == 1  # the Trainer logs interval means (of one step: the step)
    window_max = spec["logging"] in WINDOW_MAX_PATHS
    labels, creep = labels_as_logged(run, logged_steps(spec), points, window_max,
                                     grad_norm=spec["logging"] in GRAD_NORM_PATHS,
                                     step_time=window_max)  # only the hooks log step times
    if "vanishing_gradients" not in labels:
        steps, layers = logged_layer_norms(run.logs)
        if zoo_labels.layer_vanishing(layers, np.isfinite(run.loss[steps - 1])):  # the hooks log steps 1..N
            labels["vanishing_gradients"] = [int(logged_steps(spec)[0])]
    return labels, creep


def labels_as_logged(run: ZooRun, logged: np.ndarray, points: bool, window_max: bool, grad_norm: bool,
                     step_time: bool) -> tuple[dict[str, list[int]], bool]:
    """The labels of `zoo_labels.label_run` for the run's raw values as logs show them: the loss at
    the `logged` steps (`points`: the logged step's own value, else interval means;
    `window_max`: with each window's maximum), the gradient norm of each logged step when the
    logs carry one (`grad_norm`), step times when they carry them. One function for the run's
    own logs (`labels_for`) and for every rendering that logs it differently (`metamorphic`)."""
    grad = run.grad_norm if grad_norm else np.full(run.grad_norm.shape, np.nan)
    shown = np.zeros(run.grad_norm.size, dtype=bool)
    shown[logged - 1] = True  # the logs carry the norm of the logged step itself
    labels, creep = zoo_labels.label_run(run.loss, grad, visibility(logged, window_max, points, run.loss),
                                         run.step_time if step_time else None, lr=run.lr, grad_shown=shown)
    injected = run.spec.get("corrupt_steps") or []
    if injected:  # rule 6b: the injected corrupted batches the logged loss shows
        loss_logged, at = logged_loss(run.loss, logged, points, window_max)
        found = zoo_labels.injected_spikes(loss_logged, at, injected, zoo_labels.smoothing_window(run.loss.size))
        if found:
            labels["loss_spike"] = sorted(set(labels.get("loss_spike", [])) | set(found))
    return labels, creep


def logged_loss(loss: np.ndarray, logged: np.ndarray, points: bool, window_max: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the loss as the logs show it, the logged steps it is shown at): each logged step's own
    value, the maximum since the previous logged step (`window_max`, our hooks' `train/loss_max`)
    or, for interval means, the mean of each whole window (`interval_means`)."""
    if window_max:  # the windows (previous logged step, logged step]: starts 0, logged[0], ...
        return np.maximum.reduceat(loss[: logged[-1]], np.concatenate(([0], logged[:-1]))), logged
    if points:
        return loss[logged - 1], logged
    means = interval_means(loss, int(logged[0]))
    return means, logged[: means.size]


def logged_layer_norms(logs: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """(steps, per-layer gradient norms at those steps): the norms (root of the sum of squares of
    a layer's parameters' norms) in depth order, as the run's logs carry them
    (`grad_norm/<index>.<name>`, our hooks), read with TensorBoard's own event reader, at the
    steps every layer has; no steps and [] when the logs have none."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    layers: dict[int, dict[int, float]] = {}
    for events in sorted(logs.rglob("events.out.tfevents*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            head, _, name = tag.partition("/")
            depth = name.split(".")[0]
            if head != "grad_norm" or not depth.isdigit():
                continue
            squares = layers.setdefault(int(depth), {})
            for event in accumulator.Scalars(tag):
                squares[event.step] = squares.get(event.step, 0.0) + event.value**2
    if not layers:
        return np.zeros(0, dtype=np.int64), []
    steps = sorted(set.intersection(*(set(v) for v in layers.values())))
    return np.array(steps, dtype=np.int64), [np.sqrt([layers[d][s] for s in steps]) for d in sorted(layers)]


def _copy_logs(source: Path, folder: Path) -> None:
    """Copy the run's logs; a lone `rank_0/` (hooks, MindFormers) is flattened so the run keeps
    the case's name."""
    inner = list(source.iterdir())
    if len(inner) == 1 and inner[0].is_dir():
        source = inner[0]
    shutil.copytree(source, folder, dirs_exist_ok=True)


def describe(spec: dict) -> str:
    """The settings that matter when reading a misjudged run."""
    text = (f"{spec['arch']} d{spec['depth']} {spec['activation']} {spec['optimizer']} lr={spec['lr']:.2g} "
            f"{spec['schedule']} {spec['precision']} b{spec['batch']} {spec['steps']} steps, "
            f"{spec['logging']} every {spec['log_every']}")
    return text + (f", corrupt at {spec['corrupt_steps']}" if spec.get("corrupt_steps") else "")


def cases(split: str) -> list[Case]:
    if split not in SPLIT_SEEDS:
        return []
    all_specs = specs(split)
    ensure_trained(all_specs, JOBS)
    out = []
    for spec in all_specs:
        run = load(spec)
        expected, creep = labels_for(run)
        undetermined = zoo_labels.undetermined_kinds(expected, run.loss, run.lr)
        out.append(Case(spec["name"], partial(_copy_logs, run.logs), expected, family=FAMILY, creep=creep,
                        steps=spec["steps"], note=describe(spec), undetermined=undetermined,
                        noise=zoo_labels.log_noise(run.loss)))
    return out


def main(argv: list[str]) -> int:
    """`python -m bench.detection.cases_zoo train SPLIT [JOBS]`: fill the cache only."""
    if len(argv) >= 2 and argv[0] == "train":
        ensure_trained(specs(argv[1]), int(argv[2]) if len(argv) > 2 else 1)
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
