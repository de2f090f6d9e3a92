"""The benchmark's count of missed kinds that a report carries as part of another alarm (one
event, one alarm: `analysis/same_event.py`), which every figure still counts as missed."""

from __future__ import annotations

from bench.detection.case import Case
from bench.detection.run import Predictions, print_said_once, run_level


def _case(name: str, expected: dict[str, list[int]]) -> Case:
    return Case(name=name, write=lambda folder: None, expected=expected, family="zoo")


def test_a_kind_reported_only_as_part_of_another_alarm_is_missed_and_counted_apart(capsys):
    cases = [_case("folded", {"nonfinite": [10], "divergence": [5]}),
             _case("blind", {"divergence": [40]}),
             _case("found", {"divergence": [7]})]
    predictions = Predictions("tb-health", alarms={"folded": [("nonfinite", 10)], "blind": [],
                                                   "found": [("divergence", 7)]},
                              part_of={"folded": {"divergence"}, "blind": set(), "found": set()})
    assert run_level(cases, predictions, "divergence").recall == 1 / 3  # still missed by the figures
    print_said_once(cases, predictions)
    assert capsys.readouterr().out.strip().endswith("divergence 1 of 2")


def test_nothing_is_printed_when_no_miss_is_part_of_another_alarm(capsys):
    cases = [_case("blind", {"divergence": [40]})]
    print_said_once(cases, Predictions("tb-health", alarms={"blind": []}))
    assert capsys.readouterr().out == ""
