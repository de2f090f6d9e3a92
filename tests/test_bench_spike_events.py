"""The benchmark's spike event matching: a finding names the span of its excursion."""

from __future__ import annotations

from bench.detection.case import Case
from bench.detection.run import Predictions, RunInfo, spike_events


def score(labels: list[int], found: list[tuple[int, int]], interval: float = 10.0) -> tuple[int, int, int]:
    case = Case("run", lambda folder: None, {"loss_spike": labels})
    predictions = Predictions("tb-health", alarms={"run": [("loss_spike", step) for step, _ in found]})
    predictions.ends = {("run", "loss_spike", step): end for step, end in found if end != step}
    counts = spike_events([case], predictions, {"run": RunInfo(interval, None, None)})
    return counts.tp, counts.fp, counts.fn


def test_one_finding_over_two_adjacent_spiking_windows_finds_both():
    assert score([150, 160], [(150, 160)]) == (2, 0, 0)


def test_a_point_finding_matches_one_label_within_the_tolerance():
    assert score([150, 160], [(150, 150)]) == (1, 0, 1)
    assert score([100], [(115, 115)]) == (1, 0, 0)
    assert score([100], [(130, 130)]) == (0, 1, 1)


def test_a_second_finding_on_an_already_matched_label_is_a_false_one():
    assert score([100], [(100, 100), (110, 110)]) == (1, 1, 0)
