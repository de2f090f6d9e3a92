"""Which logged tag plays which role (loss, learning rate, gradient norm, ...).

Users' logs come from our hooks, MindFormers, MindSpore's SummaryCollector, Hugging Face and
Megatron-style loggers, each with its own spelling. The spellings live in `contract.py`: the
ones our hooks write (README, "What is logged") plus a few common variants; the first spelling
present wins.
Users can override any role by naming the tag explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tb_health_plugin.contract import (
    HISTOGRAM_PREFIXES,
    PER_PARAMETER_PREFIXES,
    SCALAR_SPELLINGS,
    SUMMARY_COLLECTOR_HISTOGRAM_SUFFIX,
    is_samples_axis,
)


@dataclass
class RoleMap:
    """The tags chosen for each role in one run."""

    scalars: dict[str, str] = field(default_factory=dict)  # role -> tag
    per_parameter: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {param: tag}
    histograms: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {param: tag}


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
        if tag.endswith(SUMMARY_COLLECTOR_HISTOGRAM_SUFFIX):
            name = tag[: -len(SUMMARY_COLLECTOR_HISTOGRAM_SUFFIX)]
            roles.histograms.setdefault("weight_histogram", {})[name] = tag
    return roles
