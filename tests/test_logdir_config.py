"""`tb-health.toml`: the CLI and the Health tab read the same tag overrides from the logdir, so
they give one verdict per run; the CLI's `--tag` flags override the file role by role."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.logdir_config import CONFIG_FILE, LogdirConfigError, load_logdir_config
from tb_health_plugin.plugin import HealthPlugin
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"
STEPS = np.arange(400)
OVERRIDE = '[tags]\nloss = "my/objective"\n'


@pytest.fixture()
def logdir(tmp_path):
    """Runs whose usual `loss` tag is clean while the tag their user calls the loss goes NaN."""
    clean = 2.0 / (1.0 + STEPS / 40.0)
    broken = clean.copy()
    broken[250:] = np.nan
    for run in ("exp/rank_0", "exp/rank_1", "solo"):
        write_scalars(tmp_path / run, {"loss": (STEPS, clean), "my/objective": (STEPS, broken)})
    return tmp_path


def cli_report(logdir, *flags: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir), "--format", "json",
                           *flags], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def plugin_client(logdir):
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))
    return plugin, Client(application.TensorBoardWSGI([plugin]))


def get(client, path: str) -> dict:
    response = client.get(PREFIX + path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def plugin_reports(client) -> dict[str, dict]:
    names = [run["run"] for run in get(client, "/runs")["runs"]]
    return {name: get(client, f"/report?run={name}")["runs"][0] for name in names}


def test_cli_and_plugin_give_the_same_verdicts_with_the_logdirs_overrides(logdir):
    without_file = {run["run"]: run["status"] for run in cli_report(logdir)["runs"]}
    assert set(without_file.values()) == {"healthy"}  # the usual spelling `loss` wins by default
    (logdir / CONFIG_FILE).write_text(OVERRIDE)
    cli = {run["run"]: run for run in cli_report(logdir)["runs"]}
    plugin, client = plugin_client(logdir)
    try:
        reports = plugin_reports(client)
        overview = get(client, "/runs")
    finally:
        plugin._service.stop()
    assert reports == cli
    assert {run["status"] for run in cli.values()} == {"critical"}
    assert all("nonfinite" in {f["kind"] for f in run["findings"]} for run in cli.values())
    assert {run["run"]: run["signals"]["loss"] for run in overview["runs"]} == dict.fromkeys(cli, "my/objective")
    assert overview["config"] == {"file": CONFIG_FILE, "tags": {"loss": "my/objective"}, "error": None}
    tags = get(client, "/tags?run=solo")
    assert tags["signals"]["loss"] == "my/objective"


def test_cli_tag_flags_override_the_file_role_by_role(logdir):
    (logdir / CONFIG_FILE).write_text(OVERRIDE)
    report = cli_report(logdir, "--tag", "loss=loss")
    assert {run["status"] for run in report["runs"]} == {"healthy"}


def test_the_tab_follows_a_file_written_while_it_runs(logdir):
    plugin, client = plugin_client(logdir)
    try:
        assert get(client, "/report?run=solo")["runs"][0]["status"] == "healthy"
        (logdir / CONFIG_FILE).write_text(OVERRIDE)
        plugin._service.refresh_now()  # what the background refresher does every few seconds
        assert get(client, "/report?run=solo")["runs"][0]["status"] == "critical"
        (logdir / CONFIG_FILE).unlink()
        plugin._service.refresh_now()
        assert get(client, "/report?run=solo")["runs"][0]["status"] == "healthy"
    finally:
        plugin._service.stop()


@pytest.mark.parametrize(("text", "problem"), [
    ("[tags\nloss = 1", "not valid TOML"),
    ('[tags]\nlos = "x"\n', "unknown role 'los'"),
    ('[tags]\nloss = ""\n', "non-empty string"),
    ('[tag]\nloss = "x"\n', "unknown section 'tag'"),
    ('tags = "loss"\n', "must be a table"),
])
def test_an_unusable_file_is_named_by_the_cli_and_reported_by_the_tab(logdir, text, problem):
    (logdir / CONFIG_FILE).write_text(text)
    with pytest.raises(LogdirConfigError, match=problem):
        load_logdir_config(logdir)
    done = subprocess.run([sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and CONFIG_FILE in done.stderr and problem in done.stderr
    plugin, client = plugin_client(logdir)
    try:
        overview = get(client, "/runs")
    finally:
        plugin._service.stop()
    assert problem in overview["config"]["error"] and overview["config"]["tags"] == {}
    assert {run["status"] for run in overview["runs"]} == {"healthy"}  # analysed without the overrides
