"""One place per finding kind, one message catalogue: the registry, the .po files, the rendering."""

from __future__ import annotations

import re
import string

import numpy as np
import pytest

from tb_health_plugin.analysis import engine
from tb_health_plugin.analysis.event import Event, Phrase
from tb_health_plugin.analysis.kinds import registry
from tb_health_plugin.analysis.render import kind_labels, render_finding
from tb_health_plugin.contract import CAUSES, KINDS
from tb_health_plugin.i18n import LANGUAGES, default_language
from tb_health_plugin.i18n.catalogue import messages
from tb_health_plugin.run_data import RunData, ScalarSeries

HAN = re.compile(r"[\u4e00-\u9fff]")
SHARED = ("join.", "sentence", "note", "kind.", "cause.")  # used by the renderer and the engine
# the words around the findings: the CLI's text report and its lines on stderr (`check`, `convert`), the readers' lines,
# `tb-health report`'s headings and the alerts', the commands' --help
FRAME = ("cli.", "convert.", "reader.", "report.", "alert.", "status.", "severity.", "list_separator", "help.")


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def declared_ids(kind) -> set[str]:
    ids = {*kind.messages, *kind.advice, f"kind.{kind.name}"}
    for cause in kind.causes:
        ids |= {f"cause.{cause}", f"cause.{cause}.advice"}
    return ids


def test_the_registry_holds_exactly_the_contracts_kinds_in_its_order():
    assert [kind.name for kind in registry()] == list(KINDS)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_kind_has_its_messages_advice_causes_and_name_in_every_language(lang):
    catalogue = messages(lang)
    for kind in registry():
        missing = sorted(i for i in declared_ids(kind) if not catalogue.get(i))
        assert not missing, f"{kind.name}: {lang}.po lacks {missing}"
    for cause in CAUSES:
        assert catalogue.get(f"cause.{cause}") and catalogue.get(f"cause.{cause}.advice"), cause


def test_both_languages_have_the_same_ids_with_the_same_placeholders():
    english, chinese = messages("en"), messages("zh")
    assert set(english) == set(chinese)
    for message_id, template in english.items():
        assert placeholders(template) == placeholders(chinese[message_id]), message_id
    # every Chinese entry is Chinese, but for those that are only placeholders or a symbol
    not_chinese = {message_id for message_id, template in chinese.items() if not HAN.search(template)}
    assert not_chinese == {"note", "join.advice", "sentence", "weights.names", "kind.nonfinite", "list_separator",
                           "note.multiple_writers.writers.separator"}


def test_every_catalogue_entry_belongs_to_a_kind_or_to_the_renderer():
    declared = set().union(*(declared_ids(kind) for kind in registry()))
    unused = [i for i in messages("en") if i not in declared and not i.startswith(SHARED + FRAME)]
    assert unused == []


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, "en"),
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LC_MESSAGES": "zh_TW.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
        ({"LC_ALL": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "en"),
        ({"LC_ALL": "", "LANG": "zh_SG"}, "zh"),
        ({"LANG": "C"}, "en"),
        ({"LANG": "fr_FR.UTF-8"}, "en"),
        ({"LANG": "not a locale"}, "en"),
    ],
)
def test_the_default_language_follows_the_posix_locale_variables(environ, expected):
    assert default_language(environ) == expected


def spiky_and_nan_runs() -> list[RunData]:
    rng = np.random.default_rng(1)
    steps = np.arange(1, 1201) * 10
    y = np.log(0.5 + 3.0 * (1 + steps / 300.0) ** -0.7) + 0.02 * rng.standard_normal(steps.size)
    y[800] += np.log(4.0)
    loss = np.full(300, 1.0)
    loss[200:] = np.nan
    grad = np.ones(300)
    grad[190:] = np.inf
    nan_steps = np.arange(300) * 10
    return [
        RunData("b", {"train/loss": ScalarSeries.from_lists(steps, np.exp(y))}),
        RunData(
            "run",
            {
                "train/loss": ScalarSeries.from_lists(nan_steps, loss),
                "train/grad_norm": ScalarSeries.from_lists(nan_steps, grad),
            },
        ),
    ]


def test_english_messages_read_as_before_the_catalogue():
    """The texts the detectors wrote before the catalogue existed, word for word."""
    reports = engine.analyze_runs(spiky_and_nan_runs())
    found = [f["message"] for report in reports for f in report["findings"]]
    assert found == [
        "The loss jumps 4x above its local trend at step 8010 (1 logged point); the last healthy step is 8000: "
        "inspect the batch(es) at steps 8010-8010 and restart from a checkpoint at or before step 8000 if the "
        "loss does not recover.",
        "The gradient norm becomes inf at step 1900 and stays non-finite to the end. Restart from a checkpoint "
        "at or before step 1890 with a lower learning rate or loss scale, and check the batches around it. "
        "Likely cause: non-finite values appeared first in the gradients and only later in the loss, an "
        "overflow in the backward pass; try to clip gradients, lower the learning rate, or use loss scaling / bf16.",
        "The loss diverges and ends non-finite (from step 2000); restart from a checkpoint at or before step "
        "1990 with a lower learning rate. Likely cause: non-finite values appeared first in the gradients and "
        "only later in the loss, an overflow in the backward pass; try to clip gradients, lower the learning "
        "rate, or use loss scaling / bf16.",
        "The training loss becomes nan at step 2000 and stays non-finite to the end: this is where the "
        "divergence reported for the loss ends; see that finding for where it began and what to do.",
    ]


def test_chinese_reports_carry_the_same_findings_and_figures_in_chinese():
    runs = spiky_and_nan_runs()
    english, chinese = engine.analyze_runs(runs), engine.analyze_runs(runs, lang="zh")
    for en_report, zh_report in zip(english, chinese, strict=True):
        assert len(en_report["findings"]) == len(zh_report["findings"])
        for en, zh in zip(en_report["findings"], zh_report["findings"], strict=True):
            assert {k: en[k] for k in ("kind", "severity", "step", "tag")} == {k: zh[k] for k in ("kind", "severity", "step", "tag")}
            assert HAN.search(zh["message"]) and "{" not in zh["message"]
            assert str(zh["step"]) in zh["message"]
            text_keys = ("advice", "cause_detail", "cause_advice")
            figures = {k: v for k, v in en["evidence"].items() if k not in text_keys}
            assert figures == {k: v for k, v in zh["evidence"].items() if k not in text_keys}
            for key in text_keys:
                assert (key in en["evidence"]) == (key in zh["evidence"])
                if key in zh["evidence"]:
                    assert HAN.search(zh["evidence"][key])


def test_a_kind_that_has_advice_gets_only_the_cause_appended_and_both_in_the_evidence():
    event = Event(
        "exploding_gradients", "critical", 1800, "train/grad_norm", "gradients.global.exploding",
        {"growth_factor": 120.0, "cause": "lr_peak", "related": {"lr": 1e-3}}, advice="gradients.advice.exploding",
    )
    english = render_finding(event, "en")
    assert english["message"] == (
        "The gradient norm rose 120x above its earlier level from step 1800. Clip the global gradient norm "
        "(e.g. 1.0) and lower the peak learning rate or lengthen its warm-up. Likely cause: the gradients blew "
        "up as the learning rate reached its peak."
    )
    assert english["evidence"]["advice"].startswith("Clip the global")
    assert english["evidence"]["cause_advice"] == (
        "Lower the peak learning rate, lengthen warm-up and clip the gradient norm."
    )
    chinese = render_finding(event, "zh")
    assert chinese["message"].startswith("梯度范数从第 1800 步起升到此前水平的 120 倍。")
    assert "可能原因" in chinese["message"]


def test_phrases_are_clauses_of_the_catalogue_rendered_in_the_same_language():
    event = Event(
        "nonfinite", "warning", 30, "train/grad_norm", "nonfinite.values",
        {"nonfinite_points": 2},
        args={
            "what": Phrase("series.gradient_norm"),
            "nonfinite": "nan",
            "tail": Phrase("nonfinite.tail.points"),
            "then": Phrase("nonfinite.never_finite"),
        },
    )
    assert render_finding(event, "en")["message"] == (
        "The gradient norm becomes nan at step 30 at 2 logged point(s). It was never finite: check the "
        "inputs, the labels and the initialisation."
    )
    assert render_finding(event, "zh")["message"].startswith("梯度范数在第 30 步变为 nan，共 2 个记录点。")


def test_the_tab_learns_every_kind_and_its_name_from_the_catalogue():
    for lang in LANGUAGES:
        labels = kind_labels(lang)
        assert set(KINDS) <= set(labels) and {"multiple_writers", "damaged_records"} <= set(labels)
    assert kind_labels("zh")["divergence"] == "发散" and kind_labels("en")["divergence"] == "divergence"


def _words(value) -> list[str]:
    return [w for v in value.values() for w in _words(v)] if isinstance(value, dict) else [value]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_reports_and_alerts_words_come_from_the_catalogue_in_every_language(lang):
    """`tb-health report`'s headings and the alerts' labels are catalogue entries (a missing id
    raises); the Chinese ones are Chinese."""
    from tb_health_plugin.notify.alerts import labels as alert_labels
    from tb_health_plugin.report.render import labels as report_labels

    words = _words(report_labels(lang)) + _words(alert_labels(lang))
    assert len(words) == 20 + 4 + 3 + 8 + 3 and all(words)
    if lang == "zh":
        assert all(HAN.search(word) for word in words), [w for w in words if not HAN.search(w)]
