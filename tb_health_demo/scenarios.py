"""The demo's runs: what each trains, what goes wrong in it, and what the analysis must report.

Plain data, no MindSpore import: the demo's command line and the tests read it to know what to expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str  # folder under the demo logdir; the hooks add `rank_<id>/` below it
    title: str
    model: str  # "transformer" or "deep_sigmoid"
    steps: int
    peak_lr: float
    warmup_steps: int = 0
    schedule: str = "cosine"  # "cosine" (after warm-up) or "constant"
    optimizer: str = "adamw"  # "adamw" or "sgd"
    corrupt_steps: tuple[int, ...] = ()  # steps whose batch has noise labels
    world_size: int = 1
    # this rank does `slow_ms` of host work before each step (a straggler). The demo's ranks train
    # side by side without communicating, so the others do not wait for it as in a synchronous
    # job; its host time (`train/host_time_ms`) names it as it would there.
    slow_rank: int | None = None
    slow_ms: float = 0.0
    expected: frozenset[str] = field(default_factory=frozenset)  # kinds that must be flagged (warning+)

    def run_names(self) -> list[str]:
        return [f"{self.name}/rank_{rank}" for rank in range(self.world_size)]

    def expected_for(self, rank: int) -> frozenset[str]:
        """In a job with a straggler only the straggler is expected to be flagged."""
        if self.slow_rank is not None and rank != self.slow_rank:
            return frozenset()
        return self.expected


TRANSFORMER_STEPS = 600

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="healthy_transformer",
        title="Healthy Transformer: warm-up then cosine decay",
        model="transformer",
        steps=TRANSFORMER_STEPS,
        peak_lr=3e-3,
        warmup_steps=60,
    ),
    Scenario(
        name="lr_too_high",
        title="Same Transformer, learning rate 100x too high: diverges",
        model="transformer",
        steps=TRANSFORMER_STEPS,
        peak_lr=0.3,
        warmup_steps=60,
        expected=frozenset({"divergence"}),
    ),
    Scenario(
        name="lr_too_small",
        title="Same Transformer, learning rate 3000x too small: stalls",
        model="transformer",
        steps=TRANSFORMER_STEPS,
        peak_lr=1e-6,
        warmup_steps=60,
        expected=frozenset({"stalled_convergence"}),
    ),
    Scenario(
        name="corrupted_batch",
        title="Healthy Transformer hit by two corrupted batches: loss spikes that recover",
        model="transformer",
        steps=TRANSFORMER_STEPS,
        peak_lr=3e-3,
        warmup_steps=60,
        corrupt_steps=(333, 467),
        expected=frozenset({"loss_spike"}),
    ),
    Scenario(
        name="deep_sigmoid",
        title="12 sigmoid layers: the gradients vanish before the first layers",
        model="deep_sigmoid",
        steps=TRANSFORMER_STEPS,
        peak_lr=0.1,
        schedule="constant",
        optimizer="sgd",
        expected=frozenset({"vanishing_gradients"}),
    ),
    Scenario(
        name="two_ranks",
        title="Two data-parallel ranks; rank 1 is a straggler (40 ms of host work a step)",
        model="transformer",
        steps=TRANSFORMER_STEPS,
        peak_lr=3e-3,
        warmup_steps=60,
        world_size=2,
        slow_rank=1,
        slow_ms=40.0,
        expected=frozenset({"throughput"}),
    ),
)


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)
