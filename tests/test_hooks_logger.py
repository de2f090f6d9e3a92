"""HealthLogger, its writer, aggregates, online analysis and rank detection, without MindSpore."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings

import numpy as np
import pytest

from tests.hooks_fixtures import ManualClock, findings, scalars, texts
from trainer_hooks import HealthLogger, HealthOptions
from trainer_hooks.aggregates import StepWindow
from trainer_hooks.online import MAX_BUSY_FRACTION, OnlineAnalyzer
from trainer_hooks.ranks import rank_from_environment


def quiet_logger(tmp_path, **kwargs) -> HealthLogger:
    kwargs.setdefault("online_analysis", False)
    kwargs.setdefault("rank", 0)
    return HealthLogger(tmp_path, **kwargs)


def test_spike_between_collections_reaches_the_window_aggregates(tmp_path):
    with quiet_logger(tmp_path, collect_freq=10) as health:
        for step in range(1, 31):
            loss = 50.0 if step == 13 else 1.0 / step
            health.log_step(step, loss, grad_norm=2.0 if step != 17 else 900.0)
    logged = scalars(tmp_path / "rank_0")
    assert sorted(logged["train/loss"]) == [1, 10, 20, 30]  # step 1: where the run starts from
    assert 13 not in logged["train/loss"]
    assert logged["train/loss_max"][20] == pytest.approx(50.0)
    # step 1's window is step 1 alone; the next one covers steps 2-10
    assert logged["train/loss_max"] == pytest.approx({1: 1.0, 10: 0.5, 20: 50.0, 30: 1.0 / 21})
    assert logged["train/loss_min"][30] == pytest.approx(1.0 / 30)
    assert logged["train/grad_norm_max"] == pytest.approx({1: 2.0, 10: 2.0, 20: 900.0, 30: 2.0})
    assert set(logged["train/nonfinite_count"].values()) == {0.0}
    assert logged["train/step_time_ms"][10] >= 0.0


def test_a_resumed_run_logs_its_first_step_too(tmp_path):
    with quiet_logger(tmp_path, collect_freq=10) as health:
        for step in range(101, 125):
            health.log_step(step, 1.0 / step)
    logged = scalars(tmp_path / "rank_0")
    assert sorted(logged["train/loss"]) == [101, 110, 120]  # and the partial window up to 124 on close:
    assert logged["train/loss_max"] == pytest.approx({101: 1 / 101, 110: 1 / 102, 120: 1 / 111, 124: 1 / 121})


def test_nonfinite_values_are_logged_as_such_and_counted(tmp_path):
    with quiet_logger(tmp_path, collect_freq=5) as health:
        for step in range(1, 11):
            loss = {3: math.nan, 4: math.inf, 10: math.nan}.get(step, 1.0)
            health.log_step(step, loss, grad_norm=-math.inf if step == 8 else 1.0)
    logged = scalars(tmp_path / "rank_0")
    assert math.isnan(logged["train/loss"][10])
    assert logged["train/nonfinite_count"] == {1: 0.0, 5: 2.0, 10: 2.0}
    assert logged["train/loss_max"][5] == math.inf
    assert logged["train/loss_min"][10] == 1.0


def test_a_partial_last_window_is_written_on_close(tmp_path):
    with quiet_logger(tmp_path, collect_freq=10) as health:
        for step in range(1, 14):
            health.log_step(step, 7.0 if step == 12 else 1.0)
    logged = scalars(tmp_path / "rank_0")
    assert logged["train/loss_max"] == {1: 1.0, 10: 1.0, 13: 7.0}


def test_unwritable_log_dir_warns_once_and_logging_goes_on(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="cannot write health logs") as caught:
        health = quiet_logger(blocker / "logs", collect_freq=2)
        for step in range(1, 21):
            health.log_step(step, 1.0, grad_norm=1.0)
            health.log_eval(step, {"loss": 1.0})
        health.close()
    assert len([w for w in caught if "cannot write" in str(w.message)]) == 1


def test_writer_failing_mid_run_warns_once(tmp_path):
    health = quiet_logger(tmp_path, collect_freq=1)
    health.log_step(1, 1.0)
    health.writer._writer.close()  # the file goes away under the writer, as on a failing disk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2, 10):
            health.log_step(step, 1.0)
        health.close()
    assert len([w for w in caught if "cannot write" in str(w.message)]) == 1


@pytest.mark.parametrize(
    "options, message",
    [
        ({"collect_freq": 0}, "collect_freq must be a positive integer"),
        ({"collect_freq": 2.5}, "collect_freq"),
        ({"histogram_freq": -1}, "histogram_freq must be a positive integer .or 0"),
        ({"findings_min_severity": "error"}, "findings_min_severity must be one of"),
        ({"batch_size": 0}, "batch_size"),
        ({"flush_secs": 0}, "flush_secs"),
    ],
)
def test_bad_options_fail_up_front_saying_what_to_do(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        HealthLogger(tmp_path, **options)
    assert not any(tmp_path.iterdir())


def test_the_options_are_one_frozen_dataclass_taken_whole_or_field_by_field(tmp_path):
    options = HealthOptions(tmp_path, 3, histogram_ranks=[1, 2], rank=0, online_analysis=False)
    assert (options.collect_freq, options.histogram_ranks) == (3, (1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.collect_freq = 4
    with pytest.raises(ValueError, match="weight_freq"):
        dataclasses.replace(options, weight_freq=-1)  # a changed copy is validated again
    with HealthLogger(options=options) as health:
        assert health.options is options and health.is_collect_step(1)
    with pytest.raises(TypeError, match="either"):
        HealthLogger(tmp_path, options=options)
    with pytest.raises(TypeError, match="colect_freq"):
        HealthLogger(tmp_path, colect_freq=3)  # a misspelt option is not silently ignored


def test_log_dir_must_be_a_path():
    with pytest.raises(ValueError, match="log_dir must be a folder path"):
        HealthLogger(None)


def test_new_findings_are_written_once_as_contract_json_and_request_a_stop(tmp_path, caplog):
    seen_steps = []

    def analyze(run):
        loss = run.scalars["train/loss"]
        seen_steps.append(int(loss.steps[-1]))
        bad = loss.steps[~np.isfinite(loss.values)]
        found = [
            {"kind": "nonfinite", "severity": "critical", "step": int(bad[0]), "tag": "train/loss",
             "message": "The loss became NaN.", "evidence": {"value": "nan"}}
        ] if len(bad) else []
        found.append({"kind": "loss_spike", "severity": "info", "step": 1, "tag": "train/loss",
                      "message": "context only", "evidence": {}})
        return {"run": run.name, "status": "critical" if bad.size else "healthy", "findings": found}

    health = HealthLogger(tmp_path, collect_freq=2, analyze_every=2, analyze=analyze, rank=0, stop_on_critical=True)
    for step in range(1, 21):
        health.log_step(step, math.nan if step >= 6 else 1.0)
    health.close()
    assert seen_steps and seen_steps[-1] == 20
    written = findings(tmp_path / "rank_0")
    assert [(step, f["kind"], f["severity"]) for step, f in written] == [(6, "nonfinite", "critical")]
    assert written[0][1]["evidence"] == {"value": "nan"}
    assert health.should_stop
    assert any("nonfinite" in record.getMessage() for record in caplog.records)


def test_a_failing_analysis_is_disabled_without_breaking_logging(tmp_path):
    def analyze(run):
        raise RuntimeError("detector bug")

    health = HealthLogger(tmp_path, collect_freq=1, analyze_every=1, analyze=analyze, rank=0)
    for step in range(1, 6):
        health.log_step(step, 1.0)
    health.close()
    assert sorted(scalars(tmp_path / "rank_0")["train/loss"]) == [1, 2, 3, 4, 5]


def test_the_projects_engine_finds_a_nan_online_and_the_finding_is_logged_once(tmp_path):
    health = HealthLogger(tmp_path, collect_freq=1, analyze_every=5, rank=0, stop_on_critical=True)
    for step in range(1, 61):
        broken = step >= 40
        health.log_step(step, math.nan if broken else 1.0 / step, grad_norm=math.nan if broken else 1.0, lr=0.1)
    health.close()
    written = findings(tmp_path / "rank_0")
    keys = [(f["kind"], f["tag"], f["step"]) for _, f in written]
    assert ("nonfinite", "train/loss", 40) in keys
    assert len(keys) == len(set(keys))
    assert all(step == f["step"] and f["severity"] in ("warning", "critical") for step, f in written)
    assert health.should_stop


def test_eval_metrics_throughput_and_notes(tmp_path):
    with quiet_logger(tmp_path, collect_freq=2, batch_size=8, seq_length=16) as health:
        for step in range(1, 5):
            health.log_step(step, 1.0)
        health.log_eval(4, {"loss": 0.5, "accuracy": 0.75, "not_a_number": "n/a"})
        health.note(4, "something cannot be logged")
        health.note(4, "something cannot be logged")
    logged = scalars(tmp_path / "rank_0")
    assert logged["eval/loss"] == {4: 0.5} and logged["eval/accuracy"] == {4: 0.75}
    tokens, samples = logged["train/tokens_per_s"][4], logged["train/throughput"][4]
    assert tokens == pytest.approx(16 * samples, rel=1e-6)
    assert texts(tmp_path / "rank_0", "health/notes") == [(4, "something cannot be logged")]


def test_weight_norms_update_ratios_and_histograms_from_named_arrays(tmp_path):
    weights = {"w": np.ones(4), "b": np.zeros(2)}
    with quiet_logger(tmp_path, collect_freq=1, weight_freq=4, histogram_freq=4, parameters=weights) as health:
        for step in range(1, 9):
            weights["w"] += 0.5  # the "optimizer" moves w by 0.5 per element each step
            health.log_step(step, 1.0)
    logged = scalars(tmp_path / "rank_0")
    assert sorted(logged["weight_norm/w"]) == [4, 8]
    assert logged["weight_norm/w"][4] == pytest.approx(3.0 * 2)  # 4 elements of 3.0
    assert logged["update_ratio/w"][4] == pytest.approx(0.5 / 2.5)
    assert logged["update_ratio/b"][8] == 0.0
    from tests.hooks_fixtures import accumulator

    assert set(accumulator(tmp_path / "rank_0").Tags()["histograms"]) == {"weight/w", "weight/b"}


def test_histograms_only_on_chosen_ranks(tmp_path):
    for rank in (0, 1):
        with quiet_logger(tmp_path, rank=rank, collect_freq=1, weight_freq=2, histogram_freq=2,
                          parameters={"w": np.arange(5.0)}, histogram_ranks=(1,)) as health:
            for step in range(1, 3):
                health.log_step(step, 1.0)
    from tests.hooks_fixtures import accumulator

    assert accumulator(tmp_path / "rank_0").Tags()["histograms"] == []
    assert accumulator(tmp_path / "rank_1").Tags()["histograms"] == ["weight/w"]


def test_step_window_statistics():
    window = StepWindow()
    for value in (3.0, math.nan, 1.0, math.inf, 2.0):
        window.add(value)
    assert (window.maximum, window.minimum, window.nonfinite_count, window.count) == (math.inf, 1.0, 2, 5)
    window.merge(3, 7.0, math.nan, 1)
    assert (window.maximum, window.minimum, window.nonfinite_count, window.count) == (math.inf, 1.0, 3, 8)
    window.reset()
    window.merge(2, 4.0, -1.0, 0)
    assert (window.maximum, window.minimum) == (4.0, -1.0)
    window.reset()
    assert math.isnan(window.maximum) and window.count == 0


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, (0, 1)),
        ({"RANK_ID": "3", "RANK_SIZE": "8"}, (3, 8)),
        ({"MS_NODE_ID": "1", "MS_WORKER_NUM": "2"}, (1, 2)),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4)),
        ({"RANK_ID": "x", "RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
    ],
)
def test_rank_from_launcher_environment(environ, expected):
    info = rank_from_environment(environ)
    assert (info.rank, info.world_size) == expected


def test_each_rank_writes_its_own_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK_ID", "5")
    monkeypatch.setenv("RANK_SIZE", "6")
    with HealthLogger(tmp_path, collect_freq=1, online_analysis=False) as health:
        health.log_step(1, 1.0)
    assert os.listdir(tmp_path) == ["rank_5"]
    assert health.rank_info.world_size == 6


def test_the_projects_readers_read_what_the_hooks_wrote(tmp_path):
    from tb_health_plugin.readers import read_logdir

    def analyze(run):
        return {"findings": [{"kind": "divergence", "severity": "warning", "step": 4, "tag": "train/loss",
                              "message": "m", "evidence": {}}]}

    with HealthLogger(tmp_path, collect_freq=2, analyze_every=1, analyze=analyze, rank=1,
                      weight_freq=2, histogram_freq=2, histogram_ranks=None, parameters={"w": np.arange(4.0)}) as health:
        for step in range(1, 7):
            health.log_step(step, float(step), grad_norm=math.nan if step == 4 else 1.0)
    (run,) = read_logdir(tmp_path)
    assert run.name == "rank_1"
    loss = run.scalars["train/loss"]
    assert loss.steps.tolist() == [1, 2, 4, 6] and loss.values.tolist() == [1.0, 2.0, 4.0, 6.0]
    assert math.isnan(run.scalars["train/grad_norm"].values[2])
    assert run.scalars["train/nonfinite_count"].values.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert "weight/w" in run.histograms
    (text,) = run.texts["health/findings"].values
    assert '"kind": "divergence"' in text


@pytest.mark.parametrize("weight_freq, histogram_freq", [(1, 3), (0, 2), (4, 3)])
def test_weight_and_histogram_frequencies_are_independent(tmp_path, weight_freq, histogram_freq):
    weights = {"w": np.ones(3)}
    with quiet_logger(tmp_path, collect_freq=1, weight_freq=weight_freq, histogram_freq=histogram_freq,
                      parameters=weights) as health:
        for step in range(1, 13):
            weights["w"] *= 2.0  # each step doubles w: an update ratio of 1 at every step
            health.log_step(step, 1.0)
    logged = scalars(tmp_path / "rank_0")
    from tests.hooks_fixtures import accumulator

    weight_steps = [s for s in range(1, 13) if weight_freq and s % weight_freq == 0]
    assert sorted(logged.get("weight_norm/w", {})) == weight_steps
    # the update ratio needs the weights of the step before (none before step 1)
    assert logged.get("update_ratio/w", {}) == {s: pytest.approx(1.0) for s in weight_steps if s > 1}
    histograms = accumulator(tmp_path / "rank_0").Histograms("weight/w")
    assert [h.step for h in histograms] == list(range(histogram_freq, 13, histogram_freq))


def test_a_slow_online_analysis_is_spaced_out_to_stay_off_the_training_path():
    clock = ManualClock()
    starts = []

    def slow_analyze(run):
        starts.append(clock.now)
        clock.now += 0.05  # the analysis takes 50 ms
        return {"findings": []}

    spacing = 0.05 / MAX_BUSY_FRACTION  # each 50 ms analysis keeps the thread busy MAX_BUSY_FRACTION of the time
    tick = spacing / 500
    analyzer = OnlineAnalyzer("rank_0", lambda findings: None, every=1, analyze=slow_analyze, clock=clock)
    for step in range(1, 1001):  # 1,000 collections over two spacings
        analyzer.record_scalar("train/loss", step, 1.0, 0.0)
        analyzer.collection_done()
        if analyzer._pending is not None:
            analyzer._pending.result(timeout=60)  # the background analysis this collection started, if any
        clock.now += tick
    analyzer.finish()
    background = starts[:-1]  # the last one is finish()'s final analysis
    assert MAX_BUSY_FRACTION <= 0.01  # the hooks' step-time budget (trainer_hooks/online.py)
    assert len(background) == 3  # at 0, one and two spacings: started by the first collection allowed
    assert np.diff(background) == pytest.approx([spacing] * 2, abs=tick * 1.1)


# ----- hostile and unlucky inputs never reach the training loop


@pytest.mark.parametrize(
    "bad",
    [
        {"loss": np.array([])},
        {"loss": "not a number"},
        {"loss": 1.0, "grad_norm": np.array([])},
        {"loss": 1.0, "lr": object()},
        {"loss": 1.0, "grad_stats": np.array([])},
        {"loss": 1.0, "window": {"steps": 2}},
    ],
    ids=["empty-loss", "string-loss", "empty-grad-norm", "object-lr", "empty-grad-stats", "incomplete-window"],
)
def test_an_unreadable_value_skips_that_call_with_one_warning(tmp_path, bad):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_logger(tmp_path, collect_freq=1) as health:
            health.log_step(1, 2.0)
            for step in (2, 3):
                health.log_step(step, **bad)  # must not raise into the training loop
            health.log_step(4, 0.5)
            health.log_eval(4, {"loss": np.array([]), "accuracy": 0.9})
    messages = [str(w.message) for w in caught if "tb-health" in str(w.message)]
    assert len([m for m in messages if "log_step at step 2 skipped" in m]) == 1  # once, not per call
    assert not any("step 3" in m for m in messages)
    assert any("log_eval('loss') at step 4 skipped" in m for m in messages)
    logged = scalars(tmp_path / "rank_0")
    assert logged["train/loss"][1] == 2.0 and logged["train/loss"][4] == 0.5
    assert logged["eval/accuracy"] == {4: pytest.approx(0.9)}


def test_stop_on_critical_stops_at_the_nonfinite_step_not_after_the_analysis(tmp_path):
    """The analysis runs every 10 collections in the background; the NaN is known at once."""
    with HealthLogger(tmp_path, collect_freq=10, rank=0, stop_on_critical=True) as health:
        stopped_at = None
        for step in range(1, 61):
            health.log_step(step, math.nan if step >= 53 else 1.0 / step, grad_norm=1.0)
            if health.should_stop:
                stopped_at = step
                break
    assert stopped_at == 53
    logged = scalars(tmp_path / "rank_0")
    assert math.isnan(logged["train/loss"][53])  # the step it stopped at is logged in full
    assert logged["train/nonfinite_count"][53] == 1.0 and logged["train/loss_max"][53] == pytest.approx(1 / 51)  # steps 51-53
    assert any(step == 53 and "stopping at this step" in text for step, text in texts(tmp_path / "rank_0", "health/notes"))


def test_stop_on_critical_stops_on_an_applied_nonfinite_gradient_not_on_a_skipped_overflow(tmp_path):
    with HealthLogger(tmp_path, collect_freq=10, rank=0, stop_on_critical=True, online_analysis=False) as health:
        health.log_step(1, 1.0, grad_norm=math.inf, overflow=1.0, loss_scale=2.0**15)  # loss scaling at work
        assert not health.should_stop
        health.log_step(2, 1.0, grad_norm=math.inf, overflow=0.0, loss_scale=2.0**15)  # applied: weights now Inf
        assert health.should_stop


def test_the_online_analysis_keeps_a_bounded_number_of_points(tmp_path):
    from trainer_hooks.online import MAX_POINTS_PER_TAG, OnlineAnalyzer

    analyzer = OnlineAnalyzer("rank_0", lambda findings: None, analyze=lambda run: {"findings": []})
    points = 10 * MAX_POINTS_PER_TAG + 123
    for step in range(1, points + 1):
        analyzer.record_scalar("train/loss", step, 1.0 / step, float(step))
        analyzer.record_scalar("train/lr", step, 1e-3, float(step))
    kept, nbytes = analyzer.retained()
    assert kept <= 2 * MAX_POINTS_PER_TAG
    assert nbytes <= 2 * MAX_POINTS_PER_TAG * 24  # step, value and wall time: 8 bytes each
    loss = analyzer.run_data().scalars["train/loss"]
    steps = loss.steps.tolist()
    assert steps[0] == 1 and steps == sorted(steps)  # the start of the run stays
    newest = steps[-MAX_POINTS_PER_TAG // 2:]
    assert newest == list(range(points - MAX_POINTS_PER_TAG // 2 + 1, points + 1))  # the recent window is complete
    assert loss.values[-1] == pytest.approx(1.0 / points)
    # and past the bound, more points cost no more memory (bytes traced, not the store's own count)
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for step in range(points + 1, points + 4 * MAX_POINTS_PER_TAG):
        analyzer.record_scalar("train/loss", step, 1.0 / step, float(step))
        analyzer.record_scalar("train/lr", step, 1e-3, float(step))
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more for {8 * MAX_POINTS_PER_TAG} more points"


def test_a_disk_filling_up_gives_one_warning_and_no_thread_traceback(tmp_path):
    """RLIMIT_FSIZE makes writes past the limit fail with EFBIG, as a full disk fails them."""
    import subprocess
    import sys
    from pathlib import Path

    script = r"""
import resource, signal, sys, warnings
from trainer_hooks import HealthLogger
warnings.simplefilter("always")
health = HealthLogger(sys.argv[1], collect_freq=1, rank=0, online_analysis=False, flush_secs=0.05)
for step in range(1, 5):
    health.log_step(step, 1.0)
health.flush()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (health.writer_size_for_test, resource.RLIM_INFINITY))
for step in range(5, 3000):
    health.log_step(step, 1.0, grad_norm=1.0, lr=1e-3)
    if step % 100 == 0:
        health.flush()
health.close()
print("trained to the end")
"""
    import os

    root = Path(__file__).resolve().parents[1]
    script = script.replace("health.writer_size_for_test", "sum(os.path.getsize(os.path.join(sys.argv[1], 'rank_0', f)) "
                            "for f in os.listdir(os.path.join(sys.argv[1], 'rank_0'))) + 2000")
    script = script.replace("import resource,", "import os, resource,")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert result.returncode == 0 and "trained to the end" in result.stdout, result.stderr[-2000:]
    assert "Exception in thread" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.count("cannot write health logs") == 2  # one warning: the logging line and its RuntimeWarning


def test_a_collection_is_one_event_that_tensorboard_and_our_readers_read_whole(tmp_path):
    """Building and serialising one event per scalar cost 4x the CPU in the training thread."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from tb_health_plugin.readers import read_logdir

    norms = {"dense.weight": 0.5, "dense.bias": 0.25}
    with quiet_logger(tmp_path, collect_freq=5, batch_size=8) as health:
        for step in range(1, 11):
            health.log_step(step, 1.0 / step, grad_norm=2.0, param_grad_norms=norms, lr=0.1)
    (path,) = (tmp_path / "rank_0").glob("*tfevents*")
    events = [event for event in EventFileLoader(str(path)).Load() if event.HasField("summary")]
    tags_per_step = {event.step: [value.tag for value in event.summary.value] for event in events}
    assert sorted(tags_per_step) == [1, 5, 10] and len(events) == 3  # one event per collection
    assert {"train/loss", "train/grad_norm", "grad_norm/dense.weight", "train/lr", "train/loss_max",
            "train/step_time_ms"} <= set(tags_per_step[10])
    logged = scalars(tmp_path / "rank_0")
    assert logged["train/loss"] == pytest.approx({1: 1.0, 5: 0.2, 10: 0.1})
    assert logged["grad_norm/dense.bias"] == pytest.approx({1: 0.25, 5: 0.25, 10: 0.25})
    (run,) = read_logdir(tmp_path)
    assert run.scalars["train/loss_max"].steps.tolist() == [1, 5, 10]
    assert run.scalars["grad_norm/dense.weight"].values.tolist() == [0.5, 0.5, 0.5]


def test_one_steps_histograms_are_one_event_with_exact_statistics(tmp_path):
    """Every tag of a histogram step goes into one event; what TensorBoard reads back holds the
    finite values' count, sum, sum of squares, range and bucket counts; an all-NaN tensor is left out."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    from tests.hooks_fixtures import accumulator

    rng = np.random.default_rng(3)
    w = rng.standard_normal(1000)
    w[[5, 17]] = [np.nan, np.inf]
    c = rng.standard_normal(500).astype(np.float32)  # binned as float32, summed in float64
    weights = {"w": w, "b": np.full(3, np.nan), "c": c}
    with quiet_logger(tmp_path, collect_freq=1, weight_freq=0, histogram_freq=2, parameters=weights) as health:
        for step in (1, 2):
            health.log_step(step, 1.0)
    run = tmp_path / "rank_0"
    (histogram,) = accumulator(run).Histograms("weight/w")
    finite = w[np.isfinite(w)]
    value = histogram.histogram_value
    assert (histogram.step, value.num, value.min, value.max) == (2, 998, finite.min(), finite.max())
    assert value.sum == pytest.approx(finite.sum(), rel=1e-12)
    assert value.sum_squares == pytest.approx(np.dot(finite, finite), rel=1e-12)
    counts, edges = np.histogram(finite, bins=30)
    assert list(value.bucket) == counts.tolist()
    assert list(value.bucket_limit) == pytest.approx(edges[1:].tolist(), rel=1e-12)
    assert set(accumulator(run).Tags()["histograms"]) == {"weight/w", "weight/c"}
    (histogram,) = accumulator(run).Histograms("weight/c")
    value, c64 = histogram.histogram_value, c.astype(np.float64)
    assert (value.num, value.min, value.max, sum(value.bucket)) == (500, c64.min(), c64.max(), 500)
    assert (value.sum, value.sum_squares) == (pytest.approx(c64.sum(), rel=1e-12), pytest.approx(np.dot(c64, c64), rel=1e-12))
    assert list(value.bucket_limit) == pytest.approx(np.histogram(c64, bins=30)[1][1:].tolist(), rel=1e-6)
    events = [Event.FromString(record) for path in sorted(run.glob("*tfevents*")) for record in RawEventFileLoader(str(path)).Load()]
    histogram_events = [event for event in events if any(v.HasField("histo") for v in event.summary.value)]
    assert [sorted(v.tag for v in event.summary.value) for event in histogram_events] == [["weight/c", "weight/w"]]


def test_the_writers_c_crc_frames_records_as_tensorboard_does(tmp_path):
    """Same bytes as TensorBoard's pure-Python framing, for empty, short and long records; the
    hooks' writer uses it and TensorBoard reads its files back (checking every CRC)."""
    import io

    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.summary.writer.record_writer import RecordWriter

    from trainer_hooks.writer import SafeEventWriter, crc_record_writer_class

    theirs, ours = io.BytesIO(), io.BytesIO()
    for data in (b"", b"x", bytes(range(256)) * 40):
        RecordWriter(theirs).write(data)
        crc_record_writer_class()(ours).write(data)
    assert ours.getvalue() == theirs.getvalue()
    writer = SafeEventWriter(str(tmp_path))
    assert type(writer._writer._async_writer._writer) is crc_record_writer_class()
    writer.scalars([("a", 1.0), ("b", 2.0)], 3)
    writer.close()
    (path,) = tmp_path.glob("*tfevents*")
    assert len(list(RawEventFileLoader(str(path), detect_file_replacement=False).Load())) == 2
