"""The contract between what writes training logs and what reads them, in one module.

The hooks (`trainer_hooks`) write these tags; the readers, the analysis, the CLI and the Health
tab read them. Keeping the names here, and nowhere else, is what lets one side change without
silently breaking the other, in the way TensorBoard's `plugins/scalar/metadata.py` holds a
plugin's names. The module depends on nothing (the standard library only), so every layer,
the training side included, may import it; `http_api.md` describes the report it versions.

What it holds: the tag names our hooks write and the other spellings read for each role, the
tags whose x axis is not the training step, the finding kinds, severities, run statuses and
cause codes of a report, the rank/job naming of runs and the report version.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# Report shape
REPORT_VERSION = 1

SEVERITIES = ("info", "warning", "critical")  # mildest first
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
STATUSES = ("healthy", "warning", "critical", "no_data")  # a run's verdict

KINDS = (
    "nonfinite",
    "divergence",
    "loss_spike",
    "exploding_gradients",
    "vanishing_gradients",
    "stalled_convergence",
    "lr_schedule",
    "loss_scale",
    "throughput",
    "overfitting",
    "weight_updates",  # weights that stop changing or update far too much
    "weight_distribution",  # weight norms drifting or values saturating
    "check_error",  # info only: a check could not run on this run
)

# The likely-cause codes a finding's evidence may carry (`evidence["cause"]`).
CAUSES = (
    "mixed_precision_overflow",
    "lr_change",
    "unstable_update",
    "bad_batch",
    "data",
    "backward_overflow",
    "forward_nonfinite",
    "finite_blow_up",
    "lr_peak",
    "lr_at_floor",
    "dead_gradients",
    "vanishing_gradients",
    "exploding_gradients",
)


def worst_status(severities, has_data: bool = True) -> str:
    """A run's verdict from its findings' severities: the worst one, `healthy` when none."""
    if not has_data:
        return "no_data"
    worst = max((SEVERITY_RANK[s] for s in severities), default=0)
    return ("healthy", "warning", "critical")[worst]


# ---------------------------------------------------------------------------------------------
# Tags written by the hooks (README, "What is logged")
LOSS = "train/loss"
LEARNING_RATE = "train/lr"
GRAD_NORM = "train/grad_norm"
LOSS_SCALE = "train/loss_scale"
OVERFLOW = "train/overflow"
LOSS_MAX = "train/loss_max"  # window aggregates over every step since the last logged one
LOSS_MIN = "train/loss_min"
GRAD_NORM_MAX = "train/grad_norm_max"
NONFINITE_COUNT = "train/nonfinite_count"
OVERFLOW_COUNT = "train/overflow_count"
STEP_TIME_MS = "train/step_time_ms"
HOST_TIME_MS = "train/host_time_ms"  # time outside the compiled step
THROUGHPUT = "train/throughput"  # samples per second
TOKENS_PER_S = "train/tokens_per_s"
EVAL_PREFIX = "eval/"  # + the metric's name, from `log_eval`
EVAL_LOSS = EVAL_PREFIX + "loss"
FINDINGS = "health/findings"  # text: the hooks' online findings, one JSON object each
NOTES = "health/notes"  # text: what the hooks could not log, said once
# scalar: after each online analysis, at the last step it covered, the run's online verdict as
# its index in STATUSES (0 healthy, 1 warning, 2 critical, 3 no_data). A rank reporting nothing
# is told apart from one that was never analysed online (`analysis/triage.py` trusts only the former).
ONLINE_VERDICT = "health/online_verdict"

# Per-parameter scalars and histograms: prefix + parameter name.
PARAM_GRAD_NORM_PREFIX = "grad_norm/"
PARAM_WEIGHT_NORM_PREFIX = "weight_norm/"
PARAM_UPDATE_RATIO_PREFIX = "update_ratio/"
GRAD_HISTOGRAM_PREFIX = "grad/"
WEIGHT_HISTOGRAM_PREFIX = "weight/"

# ---------------------------------------------------------------------------------------------
# Roles: for each, the spellings read, ours first; the first one a run has wins.
SCALAR_SPELLINGS: dict[str, tuple[str, ...]] = {
    "loss": (LOSS, "loss", "train_loss", "loss/auto", "lm-loss", "Loss/train", "train/lm_loss"),
    "lr": (LEARNING_RATE, "learning-rate", "train/learning_rate", "lr", "lr-AdamW", "learning_rate"),
    "grad_norm": (GRAD_NORM, "grad-norm", "grad_norm", "global_norm", "train/global_norm"),
    "loss_scale": (LOSS_SCALE, "loss-scale", "loss_scale", "scale_sense"),
    "overflow": (OVERFLOW, "overflow"),
    "step_time_ms": (STEP_TIME_MS,),
    "step_time_s": ("iteration-time", "train/iteration_time", "iteration_time"),
    "host_time_ms": (HOST_TIME_MS,),
    "throughput": (THROUGHPUT, "throughput"),
    "eval_loss": (EVAL_LOSS, "eval_loss", "val_loss", "Loss/eval", "validation/loss", "eval/lm_loss"),
    "loss_max": (LOSS_MAX,),
    "loss_min": (LOSS_MIN,),
    "grad_norm_max": (GRAD_NORM_MAX,),
    "nonfinite_count": (NONFINITE_COUNT,),
    "overflow_count": (OVERFLOW_COUNT,),
}

PER_PARAMETER_PREFIXES: dict[str, str] = {
    PARAM_GRAD_NORM_PREFIX: "param_grad_norm",
    "local_norm/": "param_grad_norm",  # MindFormers' per-parameter gradient norms
    PARAM_WEIGHT_NORM_PREFIX: "param_weight_norm",
    PARAM_UPDATE_RATIO_PREFIX: "param_update_ratio",
}

HISTOGRAM_PREFIXES: dict[str, str] = {
    GRAD_HISTOGRAM_PREFIX: "grad_histogram",
    WEIGHT_HISTOGRAM_PREFIX: "weight_histogram",
}
SUMMARY_COLLECTOR_HISTOGRAM_SUFFIX = "/auto"  # SummaryCollector's `<param>/auto` weight histograms

# ---------------------------------------------------------------------------------------------
# Tags whose x axis is not the training step. MindFormers' `MFLossMonitor` writes a twin of
# each of its scalars (`loss vs samples`, `learning-rate vs samples`, `batch-size vs samples`,
# `loss-scale vs samples`, `grad-norm vs samples`, `iteration-time vs samples`, `throughput vs
# samples`) whose "step" is the number of samples seen; its tensorboardX writer turns the spaces
# into `_`. Megatron-style loggers write the same names through writers that keep the spaces.
# Such a tag never sets a run's step range, never plays a role and is served against samples.
SAMPLES_AXIS_SUFFIX = "_vs_samples"
SAMPLES_AXIS_SUFFIXES = (SAMPLES_AXIS_SUFFIX, " vs samples")
STEP_AXIS, SAMPLES_AXIS = "step", "samples"  # what a series' x values count


def is_samples_axis(tag: str) -> bool:
    return tag.endswith(SAMPLES_AXIS_SUFFIXES)


def x_axis_of(tag: str) -> str:
    """`samples` for a tag logged against the number of samples seen, else `step`."""
    return SAMPLES_AXIS if is_samples_axis(tag) else STEP_AXIS


# ---------------------------------------------------------------------------------------------
# Ranks and jobs: every rank of a job logs its own run folder `rank_<id>` under the job's folder.
RANK_FOLDER_PREFIX = "rank_"
_RANK_RUN = re.compile(r"^(?P<job>.*?)/?" + RANK_FOLDER_PREFIX + r"(?P<rank>\d+)$")


def rank_folder(rank: int) -> str:
    return f"{RANK_FOLDER_PREFIX}{rank}"


def job_of(run: str) -> str | None:
    """`exp1/rank_3` -> `exp1`; `rank_0` -> `.`; a run that is not a rank -> None."""
    match = _RANK_RUN.match(run)
    if not match:
        return None
    return match.group("job") or "."


def rank_of(run: str) -> int | None:
    match = _RANK_RUN.match(run)
    return int(match.group("rank")) if match else None
