"""Which logged tag plays which role (loss, learning rate, gradient norm, ...).

Users' logs come from our hooks, MindFormers, MindSpore's SummaryCollector, Hugging Face and
Megatron-style loggers, each with its own spelling. The spellings below are the ones our hooks
write (README, "What is logged") plus a few common variants; the first spelling present wins.
Users can override any role by naming the tag explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Scalar roles, each with the spellings tried in order of preference.
SCALAR_SPELLINGS: dict[str, tuple[str, ...]] = {
    "loss": ("train/loss", "loss", "train_loss", "loss/auto", "lm-loss", "Loss/train", "train/lm_loss"),
    "lr": ("train/lr", "learning-rate", "train/learning_rate", "lr", "lr-AdamW", "learning_rate"),
    "grad_norm": ("train/grad_norm", "grad-norm", "grad_norm", "global_norm", "train/global_norm"),
    "loss_scale": ("train/loss_scale", "loss-scale", "loss_scale", "scale_sense"),
    "overflow": ("train/overflow", "overflow"),
    "step_time_ms": ("train/step_time_ms",),
    "step_time_s": ("iteration-time", "train/iteration_time", "iteration_time"),
    "host_time_ms": ("train/host_time_ms",),  # time outside the compiled step (our hooks)
    "throughput": ("train/throughput", "throughput"),
    "eval_loss": ("eval/loss", "eval_loss", "val_loss", "Loss/eval", "validation/loss", "eval/lm_loss"),
    "loss_max": ("train/loss_max",),
    "loss_min": ("train/loss_min",),
    "grad_norm_max": ("train/grad_norm_max",),
    "nonfinite_count": ("train/nonfinite_count",),
}

# Per-parameter roles: tag prefix -> role. The rest of the tag is the parameter name.
PER_PARAMETER_PREFIXES: dict[str, str] = {
    "grad_norm/": "param_grad_norm",
    "local_norm/": "param_grad_norm",
    "weight_norm/": "param_weight_norm",
    "update_ratio/": "param_update_ratio",
}

HISTOGRAM_PREFIXES: dict[str, str] = {
    "grad/": "grad_histogram",
    "weight/": "weight_histogram",
}

# MindFormers writes `<tag>_vs_samples` twins whose x axis is samples, not steps.
SAMPLES_AXIS_SUFFIX = "_vs_samples"


@dataclass
class RoleMap:
    """The tags chosen for each role in one run."""

    scalars: dict[str, str] = field(default_factory=dict)  # role -> tag
    per_parameter: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {param: tag}
    histograms: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {param: tag}


def is_samples_axis(tag: str) -> bool:
    return tag.endswith(SAMPLES_AXIS_SUFFIX)


def resolve_roles(
    scalar_tags, histogram_tags=(), overrides: dict[str, str] | None = None
) -> RoleMap:
    """Pick a tag for every role found among the run's tags.

    `overrides` maps a scalar role to the tag to use (for example {"loss": "my/loss"}); an
    override naming a tag the run lacks leaves the role unassigned rather than guessing.
    """
    present = {t for t in scalar_tags if not is_samples_axis(t)}
    roles = RoleMap()
    for role, spellings in SCALAR_SPELLINGS.items():
        for spelling in spellings:
            if spelling in present:
                roles.scalars[role] = spelling
                break
    for role, tag in (overrides or {}).items():
        if tag in present:
            roles.scalars[role] = tag
        else:
            roles.scalars.pop(role, None)
    for tag in sorted(present):
        for prefix, role in PER_PARAMETER_PREFIXES.items():
            if tag.startswith(prefix) and len(tag) > len(prefix):
                roles.per_parameter.setdefault(role, {})[tag[len(prefix):]] = tag
    for tag in sorted(histogram_tags):
        for prefix, role in HISTOGRAM_PREFIXES.items():
            if tag.startswith(prefix) and len(tag) > len(prefix):
                roles.histograms.setdefault(role, {})[tag[len(prefix):]] = tag
        if tag.endswith("/auto"):  # SummaryCollector: `<param>/auto` weight histograms
            roles.histograms.setdefault("weight_histogram", {})[tag[: -len("/auto")]] = tag
    return roles
