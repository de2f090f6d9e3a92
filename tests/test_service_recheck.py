"""The plugin's refresh after a few runs grew: only the new bytes are read, only the grown runs'
own checks run again (their job's cross-rank checks too), and the reports are those a fresh
service gives for the same files."""

from __future__ import annotations

import numpy as np

from tb_health_plugin.analysis import engine
from tb_health_plugin.readers import logdir_reader
from tb_health_plugin.service import HealthService
from tb_health_plugin.tfrecord import frame
from tests.readers_fixtures import event, scalar_value, write_events

POINTS = 300


def loss_events(steps: np.ndarray, seed: int) -> list:
    rng = np.random.default_rng([seed, int(steps[0])])
    loss = 2.0 / (1 + steps / 300.0) + 0.01 * rng.standard_normal(steps.size)
    return [event(int(s), scalar_value("train/loss", v), scalar_value("train/grad_norm", 1 + v))
            for s, v in zip(steps.tolist(), loss.tolist(), strict=True)]


def analysed_now(service: HealthService) -> dict:
    """Refresh and analyse what changed, as the background pass does; every run's report."""
    service.refresh_now()
    service._analyse_changed()
    return service.reports(budget_s=60)


def test_a_grown_rank_reruns_only_its_own_checks_and_reports_match_a_fresh_service(tmp_path, monkeypatch):
    steps = np.arange(1, POINTS + 1) * 10
    files = {}
    for rank in range(3):
        files[rank] = write_events(tmp_path / "job" / f"rank_{rank}", loss_events(steps, rank))
    write_events(tmp_path / "solo", loss_events(steps, 9))
    service = HealthService(str(tmp_path), refresh_interval_s=3600)
    analysed_now(service)

    checked, reads = [], []
    original_check = engine.findings_for_run
    original_read = logdir_reader.RunState.read_new_bytes
    monkeypatch.setattr(engine, "findings_for_run",
                        lambda signals: checked.append(signals.run) or original_check(signals))

    def read_new_bytes(state, event_file):
        reads.append((event_file.path, state.files[event_file.path].offset))
        return original_read(state, event_file)

    monkeypatch.setattr(logdir_reader.RunState, "read_new_bytes", read_new_bytes)
    size = files[1].stat().st_size
    with open(files[1], "ab") as out:
        more = np.arange(POINTS + 1, POINTS + 4) * 10
        out.write(b"".join(frame(e.SerializeToString()) for e in loss_events(more, 1)))
    after = analysed_now(service)
    assert reads == [(str(files[1]), size)]
    assert checked == ["job/rank_1"]
    assert after["job/rank_1"]["steps"]["last"] == (POINTS + 3) * 10
    monkeypatch.undo()
    fresh = HealthService(str(tmp_path), refresh_interval_s=3600)
    assert analysed_now(fresh) == after
