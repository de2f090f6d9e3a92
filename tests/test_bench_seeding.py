"""The simulated benchmark families draw their cases through one seeding (`seeded_cases`)."""

from dataclasses import dataclass

import numpy as np

from bench.detection import cases_loss, cases_spikes_logging
from bench.detection.case import seeded_cases


@dataclass(frozen=True)
class Shape:
    seed: int
    counts: dict


def draw(scenario: str, rng: np.random.Generator):
    value = float(rng.random())
    return (lambda folder: None), {"draw": [value]}


def test_each_case_is_seeded_by_the_split_seed_and_its_position():
    made = seeded_cases(Shape(7, {"a": 2, "b": 1}), "x_dev", draw)
    assert [c.name for c in made] == ["x_dev_a_00", "x_dev_a_01", "x_dev_b_00"]
    expected = [float(np.random.default_rng([7, i]).random()) for i in range(3)]
    assert [c.expected["draw"][0] for c in made] == expected


def test_a_scenario_added_at_the_end_leaves_earlier_cases_alone():
    before = seeded_cases(Shape(7, {"a": 2, "b": 1}), "x", draw)
    after = seeded_cases(Shape(7, {"a": 2, "b": 1, "c": 3}), "x", draw)
    assert [c.expected for c in after[:3]] == [c.expected for c in before]


def test_the_loss_and_spike_families_draw_through_it():
    for module, prefix in ((cases_loss, "syn"), (cases_spikes_logging, "spl")):
        shape = module.SPLITS["dev"]
        made = module.cases("dev")
        assert len(made) == sum(shape.counts.values())
        assert all(c.name.startswith(f"{prefix}_dev_") for c in made)
        first = next(iter(shape.counts))
        assert made[0].name == f"{prefix}_dev_{first}_00"
