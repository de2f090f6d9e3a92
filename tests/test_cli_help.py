"""`tb-health COMMAND --help` speaks the language of `--lang`, else of the locale, from the catalogue."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tb_health_plugin.cli import COMMAND_MODULES, build_parser, help_language

ROOT = Path(__file__).resolve().parents[1]
HAN = re.compile(r"[\u4e00-\u9fff]")


def help_text(*args: str, **locale: str) -> str:
    """`tb-health ARGS` run as a user would, under exactly the locale variables given; whitespace collapsed."""
    environ = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG")}
    out = subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", *args], capture_output=True, text=True,
                         encoding="utf-8", check=True, cwd=ROOT,
                         env={**environ, **locale, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"})
    return " ".join(out.stdout.split())


def test_check_help_follows_lang_on_the_command_line():
    for args in (("check", "--help", "--lang", "zh"), ("check", "--lang=zh", "--help")):
        shown = help_text(*args, LC_ALL="C")
        assert "报告格式（默认：text）" in shown and "退出码：" in shown
        assert "report format" not in shown and "exit codes" not in shown


def test_convert_help_follows_the_locale():
    shown = help_text("convert", "--help", LC_ALL="zh_CN.UTF-8")
    assert "不在标准输出上打印汇总行" in shown and "退出码：" in shown
    assert "no summary line on stdout" not in shown


def subparsers_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


@pytest.mark.parametrize("command", COMMAND_MODULES)
def test_every_help_text_of_a_command_is_chinese_in_chinese(command):
    """Each argument's help, the description, the exit codes and the one-line summary: none left in English."""
    chinese = build_parser("zh")
    sub = subparsers_of(chinese)
    parser = sub.choices[command]
    texts = [parser.description, parser.epilog]
    texts += [a.help for a in parser._actions if a.help and not isinstance(a, argparse._HelpAction)]
    texts += [a.help for a in sub._choices_actions if a.dest == command]
    assert len(texts) >= 6 and all(HAN.search(t) for t in texts), [t for t in texts if not HAN.search(t)]
    assert HAN.search(chinese.description)


def test_english_help_keeps_its_words():
    check = help_text("check", "--help", LC_ALL="C")
    assert "report format (default: text)" in check
    assert "exit 1 when a finding reaches this severity (default: critical)" in check
    assert "exit codes: 0 no finding reaches --fail-on; 1 one does;" in check
    assert "object storage still failing after 4 attempts" in check
    assert "overrides the [tags] of LOGDIR/tb-health.toml" in check
    convert = help_text("convert", "--help", LC_ALL="C")
    assert "no summary line on stdout" in convert and "(*.tb-health-convert)" in convert
    assert "Training-health checks for TensorBoard and MindSpore logs." in help_text("--help", LC_ALL="C")


def test_the_help_language_is_the_last_valid_lang_else_the_locales(monkeypatch):
    monkeypatch.setenv("LC_ALL", "C")
    assert help_language(["check", "--lang", "zh", "--help"]) == "zh"
    assert help_language(["check", "--lang=zh", "--lang", "en"]) == "en"
    assert help_language(["check", "--lang", "fr"]) == "en"  # argparse then says which are known
    assert help_language(["check", "--", "--lang=zh"]) == "en"
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert help_language(["convert", "--help"]) == "zh"
