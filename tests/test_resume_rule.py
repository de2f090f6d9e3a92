"""One rule for resumed runs: the hooks' online analysis, the readers and TensorBoard itself keep
the same points when a run goes back to an earlier step (`tb_health_plugin/resume.py`)."""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog

from tb_health_plugin.readers import read_logdir
from tb_health_plugin.resume import surviving_points
from tests.hooks_fixtures import scalars
from tests.readers_fixtures import event, scalar_value, write_events
from trainer_hooks import HealthLogger

FIRST_RUN = range(1, 201)  # trained to step 200, then resumed from the checkpoint of step 100
RESUMED = range(100, 161)  # and stopped again at 160: steps 161-200 of the first run are abandoned


def loss_at(step: int, resumed: bool) -> float:
    return (3.0 if resumed else 2.0) / (1.0 + step / 50.0)


def test_the_later_write_wins_and_the_abandoned_timeline_goes():
    steps = np.array([1, 2, 3, 4, 5, 3, 4, 4])
    assert surviving_points(steps).tolist() == [True, True, False, False, False, True, False, True]


def test_online_analysis_reader_and_tensorboard_agree_on_a_resumed_run(tmp_path):
    health = HealthLogger(tmp_path, rank=0, collect_freq=10, analyze_every=1000)
    with health:
        for step in FIRST_RUN:
            health.log_step(step, loss_at(step, False), grad_norm=1.0, lr=1e-3)
        for step in RESUMED:  # the same logger goes back: a restart inside one process
            health.log_step(step, loss_at(step, True), grad_norm=2.0, lr=5e-4)
        online = health.online.run_data()
    (run,) = read_logdir(tmp_path)
    loss = run.scalars["train/loss"]
    assert loss.steps.tolist() == [1, *range(10, 100, 10), 100, 110, 120, 130, 140, 150, 160]
    assert loss.values[-1] == np.float32(loss_at(160, True)) and loss.values[0] == np.float32(loss_at(1, False))
    assert loss.values[-6] == np.float32(loss_at(110, True))  # the resumed run's value, not the first run's
    assert set(online.scalars) <= set(run.scalars) and "train/loss" in online.scalars
    for tag, series in online.scalars.items():  # the event file holds float32 values
        read = run.scalars[tag]
        np.testing.assert_array_equal(series.steps, read.steps, err_msg=tag)
        np.testing.assert_array_equal(series.values.astype(np.float32), read.values, err_msg=tag)
    assert online.step_range() == run.step_range() == (1, 160)


def test_the_rule_is_tensorboards_purge_at_a_marked_restart(tmp_path):
    """TensorBoard's EventAccumulator drops every point at or after a restart it is told of
    (a `SessionLog.START` event); the readers apply the same rule wherever a step goes back."""
    restart = Event(step=RESUMED[0], session_log=SessionLog(status=SessionLog.START))
    events = [event(step, scalar_value("loss", loss_at(step, False))) for step in FIRST_RUN]
    events += [restart, *(event(step, scalar_value("loss", loss_at(step, True))) for step in RESUMED)]
    write_events(tmp_path / "run", events)
    tensorboard = scalars(tmp_path / "run")["loss"]
    (run,) = read_logdir(tmp_path)
    read = run.scalars["loss"]
    assert read.steps.tolist() == sorted(tensorboard) == [*range(1, 100), *RESUMED]
    assert read.values.tolist() == [tensorboard[step] for step in read.steps.tolist()]
