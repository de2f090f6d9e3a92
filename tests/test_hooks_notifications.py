"""The hooks' job-wide claims: of the ranks that find one event, exactly one sends it."""

from __future__ import annotations

import multiprocessing

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
