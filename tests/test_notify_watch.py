"""`tb-health watch` on a real MindSpore training that blows up: the DingTalk robot (a real HTTP
server here) gets one signed message per finding per job, not one per rank, and nothing again
on the next pass."""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil

import pytest

pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402

from tb_health_plugin.cli import main  # noqa: E402
from tests.test_divergence_mindspore import custom_loop  # noqa: E402
from tests.webhook_receiver import webhook_receiver  # noqa: E402

pytestmark = pytest.mark.mindspore
SECRET = "SECwatch-test"
TOKEN = "T0KEN-not-to-be-printed"


@pytest.fixture(scope="module")
def diverged_job(tmp_path_factory):
    """SGD at learning rate 5.0 (NaN within the first window), logged as rank 0 of job `exp`;
    rank 1 is a copy, as the ranks of a data-parallel job see the same loss."""
    root = tmp_path_factory.mktemp("watch")
    scratch = root / "scratch"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(scratch)  # MindSpore writes kernel folders into the cwd
        custom_loop(root / "logs" / "exp", nn.SGD, steps=40, collect_freq=10)
    shutil.copytree(root / "logs" / "exp" / "rank_0", root / "logs" / "exp" / "rank_1")
    return root / "logs"


def test_watch_sends_one_signed_message_per_finding_per_job(diverged_job, tmp_path, monkeypatch, capsys):
    state = tmp_path / "state.json"
    with webhook_receiver() as receiver:
        monkeypatch.setenv("TB_HEALTH_DINGTALK_URL", f"{receiver.url}/robot/send?access_token={TOKEN}")
        monkeypatch.setenv("TB_HEALTH_DINGTALK_SECRET", SECRET)
        argv = ["watch", str(diverged_job), "--notify", "dingtalk", "--once", "--state", str(state),
                "--tensorboard-url", "http://tb.example:6006", "--lang", "en"]
        assert main(argv) == 0
        first_pass = list(receiver.requests)
        assert main(argv) == 0  # a second pass (a restarted watcher) finds nothing new
        assert len(receiver.requests) == len(first_pass)
    err = capsys.readouterr().err
    assert TOKEN not in err and SECRET not in err

    texts = [r.body["markdown"]["text"] for r in first_pass]
    assert len(first_pass) == 1, texts  # the divergence (its NaN end is part of it), once for the job
    text = texts[0]
    assert "divergence" in text and "job exp" in first_pass[0].body["markdown"]["title"]
    assert "also on ranks: 1" in text  # rank 1 saw the same event: named, not sent again
    assert "#health&run=exp%2Frank_0" in text
    query = first_pass[0].query
    expected = hmac.new(SECRET.encode(), f"{query['timestamp']}\n{SECRET}".encode(), hashlib.sha256).digest()
    assert base64.b64decode(query["sign"]) == expected


def test_watch_refuses_a_sink_without_its_settings(diverged_job, monkeypatch, capsys):
    monkeypatch.delenv("TB_HEALTH_FEISHU_URL", raising=False)
    assert main(["watch", str(diverged_job), "--notify", "feishu", "--once"]) == 2
    assert "TB_HEALTH_FEISHU_URL" in capsys.readouterr().err
