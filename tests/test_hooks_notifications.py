"""The hooks' job-wide claims: of the ranks that find one event, exactly one sends it."""

from __future__ import annotations

import math
import multiprocessing

import pytest

from trainer_hooks.notifications import JobClaims


def _claim(job_dir: str, step: int) -> bool:
    return JobClaims(job_dir, bucket_steps=100).claim("divergence", "train/loss", step)


def test_of_eight_rank_processes_finding_one_event_exactly_one_claims_it(tmp_path):
    steps = [500, 505, 510, 498, 520, 530, 502, 515]  # one event, placed a window or two apart by 8 ranks
    with multiprocessing.get_context("fork").Pool(8) as pool:
        won = pool.starmap(_claim, [(str(tmp_path), step) for step in steps])
    assert sum(won) == 1


def test_a_later_event_of_the_same_kind_is_claimed_again(tmp_path):
    claims = JobClaims(str(tmp_path), bucket_steps=100)
    assert claims.claim("loss_spike", "train/loss", 1_000)
    assert not claims.claim("loss_spike", "train/loss", 1_090)  # the neighbouring bucket: the same event
    assert claims.claim("loss_spike", "train/loss", 1_500)
    assert claims.claim("divergence", "train/loss", 1_000)  # another kind is another event


def test_two_ranks_of_a_job_that_go_nan_send_one_message(tmp_path, monkeypatch):
    """HealthLogger(notify=["webhook"]) on ranks 0 and 1 of one job (the real online analysis):
    the loss turns NaN on both, the receiver (a real HTTP server) gets one message for the job."""
    from tests.webhook_receiver import webhook_receiver
    from trainer_hooks import HealthLogger

    with webhook_receiver() as receiver:
        monkeypatch.setenv("TB_HEALTH_WEBHOOK_URL", receiver.url + "/hook")
        for rank in (0, 1):
            with HealthLogger(tmp_path / "job", collect_freq=5, analyze_every=4, rank=rank, notify=["webhook"],
                              lang="en", tensorboard_url="http://tb:6006") as health:
                for step in range(1, 101):
                    health.log_step(step, math.nan if step >= 60 else 2.0 / step + 0.1)
        assert receiver.wait_for(1)
    bodies = [r.body for r in receiver.requests]
    assert len(bodies) == 1, bodies
    (alert,) = bodies[0]["alerts"]
    assert alert["job"] == "job" and alert["rank"] == 0 and alert["severity"] == "critical"
    assert alert["link"] == "http://tb:6006/#health&run=job%2Frank_0"


def test_a_sink_without_its_settings_fails_before_training(tmp_path, monkeypatch):
    from trainer_hooks import HealthLogger

    monkeypatch.delenv("TB_HEALTH_DINGTALK_URL", raising=False)
    with pytest.raises(ValueError, match="TB_HEALTH_DINGTALK_URL"):
        HealthLogger(tmp_path, rank=0, notify=["dingtalk"])
    with pytest.raises(ValueError, match="unknown sink"):
        HealthLogger(tmp_path, rank=0, notify=["pager"])
