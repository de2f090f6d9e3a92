"""Hostile and unlucky inputs: nothing hangs, nothing blanks the tab, nothing is lost silently.

Each test builds the input the way it happens (a FIFO named like an event file, a clock that says
`inf`, a tag that is not UTF-8, counts past int64, a lying length field, a very deep tree) and
reads it through the readers, the `tb-health` CLI in a subprocess, and the plugin's routes served
by TensorBoard's WSGI app. A hang is caught by a subprocess timeout, not measured.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tb_health_plugin.readers import LogdirReader, read_logdir
from tb_health_plugin.readers.discovery import TFEVENTS, EventFile, discover_runs, walk_folders
from tb_health_plugin.readers.logdir_reader import read_run
from tb_health_plugin.readers.points import INT64_MAX
from tb_health_plugin.readers.schema import MsEvent
from tb_health_plugin.tfrecord import masked_crc
from tests.readers_fixtures import event, record_offsets, scalar_value, write_events, write_scalar_run

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "/data/plugin/health"
HANG_GUARD_S = 180  # far above any honest run on a busy machine; only a hang reaches it
MS_NAME = "events.out.events.summary.1767000000.0.hostile_MS"


def cli_check(logdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tb_health_plugin.cli", "check", str(logdir), "--format", "json"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
        timeout=HANG_GUARD_S, cwd=ROOT,
    )


def client_for(logdir: Path) -> Client:
    return Client(application.TensorBoardWSGI([HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))]))


def get_json(client: Client, path: str) -> dict:
    response = client.get(PREFIX + path)
    assert response.status_code == 200, (path, response.get_data(as_text=True))
    return json.loads(response.get_data(as_text=True))


def frame(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


def ms_scalar(step: int, tag: str, value: float) -> MsEvent:
    ms_event = MsEvent(wall_time=1_767_000_000.0 + step, step=step)
    ms_event.summary.value.add(tag=tag, scalar_value=value)
    return ms_event


def write_ms(run_dir: Path, events: list[bytes]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    version = MsEvent(wall_time=1_767_000_000.0, version="MindSpore.Event:1").SerializeToString()
    path = run_dir / MS_NAME
    path.write_bytes(b"".join(frame(payload) for payload in [version, *events]))
    return path


def good_loss_run(run_dir: Path, steps: int = 50) -> Path:
    return write_scalar_run(run_dir, {"loss": (list(range(steps)), [1.0 / (1 + s) for s in range(steps)])})


# ----- 1. a FIFO named like an event file


@pytest.fixture()
def logdir_with_fifo(tmp_path: Path) -> Path:
    good_loss_run(tmp_path / "good")
    os.mkfifo(tmp_path / "good" / "events.out.tfevents.1.x")
    (tmp_path / "only_fifo").mkdir()
    os.mkfifo(tmp_path / "only_fifo" / "events.out.tfevents.1.x")
    return tmp_path


def test_a_fifo_named_like_an_event_file_is_not_an_event_file(logdir_with_fifo):
    script = "import sys; from tb_health_plugin.readers import read_logdir; " \
             "print([(r.name, len(r.scalars['loss'])) for r in read_logdir(sys.argv[1])])"
    done = subprocess.run([sys.executable, "-c", script, str(logdir_with_fifo)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=HANG_GUARD_S, check=True)
    assert done.stdout.strip() == "[('good', 50)]"


def test_a_fifo_swapped_in_after_discovery_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "events.out.tfevents.2.y"
    os.mkfifo(fifo)
    run = read_run("swapped", [EventFile(str(fifo), TFEVENTS)])  # would block forever on a plain open()
    assert run.scalars == {} and run.skipped_records == 1


def test_cli_and_routes_answer_next_to_a_fifo(logdir_with_fifo):
    done = cli_check(logdir_with_fifo)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["run"] for r in json.loads(done.stdout)["runs"]] == ["good"]
    client = client_for(logdir_with_fifo)
    assert [r["run"] for r in get_json(client, "/runs")["runs"]] == ["good"]
    assert get_json(client, "/report?run=good")["runs"][0]["steps"] == {"first": 0, "last": 49}


# ----- 2. a wall time of +inf


@pytest.fixture()
def logdir_with_inf_wall_time(tmp_path: Path) -> Path:
    good_loss_run(tmp_path / "good")
    events = [event(step, scalar_value("loss", 1.0 / (1 + step)), wall_time=float("inf") if step == 20 else None)
              for step in range(50)]
    write_events(tmp_path / "clock", events)
    return tmp_path


def test_an_infinite_wall_time_costs_only_that_value(logdir_with_inf_wall_time):
    run = {r.name: r for r in read_logdir(logdir_with_inf_wall_time)}["clock"]
    assert len(run.scalars["loss"]) == 50 and run.skipped_records == 0
    assert np.isinf(run.scalars["loss"].wall_times[20])  # kept as logged
    assert run.last_wall_time == 1_767_000_000.0 + 49


def test_routes_survive_an_infinite_wall_time(logdir_with_inf_wall_time):
    client = client_for(logdir_with_inf_wall_time)
    runs = {r["run"]: r for r in get_json(client, "/runs")["runs"]}
    assert set(runs) == {"clock", "good"}
    assert runs["clock"]["last_update"] == 1_767_000_000.0 + 49
    assert get_json(client, "/report?run=clock")["runs"][0]["steps"] == {"first": 0, "last": 49}
    assert len(get_json(client, "/series?run=clock&tag=loss")["steps"]) == 50


def test_json_responses_carry_non_finite_numbers_as_null():
    from tb_health_plugin.plugin import json_body

    assert json.loads(json_body({"a": [1.0, float("inf")], "b": {"c": float("nan")}})) == {"a": [1.0, None], "b": {"c": None}}


# ----- 3. a MindSpore tag that is not UTF-8


def ms_event_with_raw_tag(step: int, raw_tag: bytes, histogram: bool = False) -> bytes:
    ms_event = MsEvent(wall_time=1_767_000_000.0 + step, step=step)
    value = ms_event.summary.value.add(tag="\x7f")  # a one-byte placeholder replaced below
    if histogram:
        value.histogram.buckets.add(left=0.0, width=1.0, count=3)
    else:
        value.scalar_value = 2.0
    payload = ms_event.SerializeToString()
    assert payload.count(b"\x0a\x01\x7f") == 1
    return payload.replace(b"\x0a\x01\x7f", b"\x0a\x01" + raw_tag)


@pytest.fixture()
def logdir_with_bad_tag(tmp_path: Path) -> Path:
    events = [ms_scalar(step, "loss", 1.0 / (1 + step)).SerializeToString() for step in range(40)]
    events.insert(10, ms_event_with_raw_tag(10, b"\xff"))
    events.insert(20, ms_event_with_raw_tag(20, b"\xfe", histogram=True))
    write_ms(tmp_path / "ms", events)
    return tmp_path


def test_a_tag_that_is_not_utf8_is_kept_under_an_escaped_name(logdir_with_bad_tag):
    (run,) = read_logdir(logdir_with_bad_tag)
    assert sorted(run.scalars) == ["\\xff", "loss"] and list(run.histograms) == ["\\xfe"]
    assert len(run.scalars["loss"]) == 40 and run.skipped_records == 0


def test_cli_and_routes_survive_a_tag_that_is_not_utf8(logdir_with_bad_tag):
    done = cli_check(logdir_with_bad_tag)
    assert done.returncode == 0, done.stderr[-2000:]
    client = client_for(logdir_with_bad_tag)
    assert [r["run"] for r in get_json(client, "/runs")["runs"]] == ["ms"]
    assert get_json(client, "/report?run=ms")["runs"][0]["run"] == "ms"
    assert "\\xff" in get_json(client, "/tags?run=ms")["scalars"]
    assert get_json(client, "/heatmap?run=ms")["run"] == "ms"


# ----- 4. histogram infinity counts past int64


def test_infinity_counts_past_int64_cost_nothing_else(tmp_path):
    events = [ms_scalar(step, "loss", 1.0 / (1 + step)).SerializeToString() for step in range(300)]
    hist = MsEvent(wall_time=1_767_000_100.0, step=100)
    value = hist.summary.value.add(tag="w")
    value.histogram.buckets.add(left=0.0, width=1.0, count=5)
    value.histogram.pos_inf_count = (1 << 63) - 1
    value.histogram.neg_inf_count = (1 << 62)  # the sum is past int64
    wrapped = MsEvent(wall_time=1_767_000_101.0, step=101)
    value = wrapped.summary.value.add(tag="w")
    value.histogram.buckets.add(left=0.0, width=1.0, count=5)
    value.histogram.pos_inf_count = -5  # a uint64 past 2^63 reads back negative
    events[100:100] = [hist.SerializeToString(), wrapped.SerializeToString()]
    write_ms(tmp_path / "ms", events)
    (run,) = read_logdir(tmp_path)
    assert len(run.scalars["loss"]) == 300 and run.skipped_records == 0
    np.testing.assert_array_equal(run.histograms["w"].inf_counts, [INT64_MAX, 0])


def test_a_decoder_failure_costs_only_the_records_that_raise(tmp_path, monkeypatch):
    from tb_health_plugin.readers import mindspore_summary

    events = [ms_scalar(step, "loss", 1.0).SerializeToString() for step in range(100)]
    poisoned = MsEvent(wall_time=1.0, step=50)
    poisoned.summary.value.add(tag="poison").histogram.buckets.add(left=0.0, width=1.0, count=1)
    events.insert(50, poisoned.SerializeToString())
    write_ms(tmp_path / "ms", events)
    real = mindspore_summary.buckets_from_bytes

    def raising(serialized):
        if serialized:
            raise RuntimeError("a decoder bug")
        return real(serialized)

    monkeypatch.setattr(mindspore_summary, "buckets_from_bytes", raising)
    (run,) = read_logdir(tmp_path)
    assert len(run.scalars["loss"]) == 100 and "poison" not in run.histograms
    assert run.skipped_records == 1


# ----- 5. a length field that lies, with a valid header checksum


def with_lying_length(data: bytes, header_at: int, length: int = 1 << 63) -> bytes:
    raw = struct.pack("<Q", length)
    return data[:header_at] + raw + struct.pack("<I", masked_crc(raw)) + data[header_at + 12 :]


@pytest.fixture()
def lying_file(tmp_path: Path) -> tuple[Path, bytes, list[tuple[int, int]]]:
    source = write_scalar_run(tmp_path / "source", {"loss": (list(range(200)), [float(s) for s in range(200)])})
    data = source.read_bytes()
    offsets = record_offsets(source)
    assert len(offsets) == 201  # the file_version record, then one per step
    return source, data, offsets


def test_a_lying_length_resynchronises_on_the_next_valid_record_and_says_so(tmp_path, lying_file):
    source, data, offsets = lying_file
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / source.name).write_bytes(with_lying_length(data, offsets[101][0]))  # step 100's record
    (run,) = read_logdir(run_dir)
    np.testing.assert_array_equal(run.scalars["loss"].steps, [s for s in range(200) if s != 100])
    assert run.skipped_records == 1
    (note,) = run.notes
    assert note.kind == "damaged_records" and "bytes skipped" in note.message
    from tb_health_plugin.analysis.render import note_text

    assert note_text(note, "en") == note.message  # the catalogue's English is the reader's own
    chinese = note_text(note, "zh")
    assert "bytes" not in chinese and "跳过" in chinese and f"{offsets[101][0]:,}" in chinese


def test_a_length_that_lies_inside_the_file_costs_only_its_own_record(tmp_path, lying_file):
    """A length pointing a few dozen records further, its own checksum valid: the payload
    checksum then fails, and the records it spanned are found again by resynchronising."""
    source, data, offsets = lying_file
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spanned = offsets[150][0] - offsets[101][0]  # step 100's header claims steps 100..149
    (run_dir / source.name).write_bytes(with_lying_length(data, offsets[101][0], length=spanned))
    (run,) = read_logdir(run_dir)
    np.testing.assert_array_equal(run.scalars["loss"].steps, [s for s in range(200) if s != 100])
    assert run.skipped_records == 1


def test_a_record_still_being_written_is_waited_for_then_a_lie_is_resolved_when_data_follows(tmp_path, lying_file):
    source, data, offsets = lying_file
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / source.name
    lying = with_lying_length(data, offsets[101][0], length=1 << 20)
    path.write_bytes(lying[: offsets[101][0] + 12 + 10])  # a header and a partial payload: a live writer
    reader = LogdirReader(run_dir)
    reader.refresh()
    assert len(reader.run(".").scalars["loss"]) == 100 and reader.run(".").skipped_records == 0
    assert reader.run(".").notes == []
    with open(path, "ab") as handle:
        handle.write(lying[offsets[101][0] + 12 + 10 :])  # the following records arrive
    reader.refresh()
    assert len(reader.run(".").scalars["loss"]) == 199 and reader.run(".").skipped_records == 1


def test_the_report_says_what_was_skipped(tmp_path, lying_file):
    source, data, offsets = lying_file
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / source.name).write_bytes(with_lying_length(data, offsets[101][0]))
    done = cli_check(tmp_path / "run")
    findings = json.loads(done.stdout)["runs"][0]["findings"]
    assert [f["kind"] for f in findings if f["kind"] == "damaged_records"] == ["damaged_records"]


# ----- 6. a very deep logdir


def remove_deep_tree(top: Path) -> None:
    """Remove a tree deeper than the recursion limit bottom-up: `shutil.rmtree` (and so pytest's
    clean-up of old temporary folders in a later session) recurses once per level and fails."""
    folders = [folder for folder, _, _ in walk_folders(str(top))]
    for folder in reversed(folders):
        for entry in os.scandir(folder):
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
        os.rmdir(folder)


def test_a_logdir_deeper_than_the_recursion_limit(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    try:
        good_loss_run(folder, steps=5)
        for _ in range(1100):
            folder = folder / "d"
            folder.mkdir()  # one at a time: os.makedirs recurses too
        good_loss_run(folder, steps=7)
        runs = discover_runs(str(tmp_path / "deep"))
        assert sorted(len(name) for name in runs) == [1, 2199]
        assert sorted(len(run.scalars["loss"]) for run in read_logdir(tmp_path / "deep")) == [5, 7]
        done = cli_check(tmp_path / "deep")
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(json.loads(done.stdout)["runs"]) == 2
    finally:
        remove_deep_tree(tmp_path / "deep")
    assert not (tmp_path / "deep").exists()


# ----- 7. two processes writing one run folder at once


def two_writer_events(first_step: int, steps: int, wall_offset: float, value: float) -> list:
    return [event(step, scalar_value("loss", value), wall_time=1_767_000_000.0 + step + wall_offset)
            for step in range(first_step, first_step + steps)]


def test_two_concurrent_writers_are_both_kept_and_said(tmp_path):
    write_events(tmp_path / "run", two_writer_events(0, 100, 0.0, 1.0), suffix=".a")
    write_events(tmp_path / "run", two_writer_events(0, 100, 0.5, 2.0), suffix=".b")  # the same steps, meanwhile
    (run,) = read_logdir(tmp_path)
    assert sorted(run.scalars) == ["loss", "loss (writer 2)"]
    np.testing.assert_array_equal(run.scalars["loss"].steps, range(100))
    assert set(run.scalars["loss"].values) == {1.0} and set(run.scalars["loss (writer 2)"].values) == {2.0}
    assert run.backtracks == []
    (note,) = run.notes
    assert note.kind == "multiple_writers" and ".b" in note.message
    client = client_for(tmp_path)
    (summary,) = get_json(client, "/runs")["runs"]
    assert "multiple_writers" in summary["kinds"]
    findings = get_json(client, "/report?run=run")["runs"][0]["findings"]
    assert [f["severity"] for f in findings if f["kind"] == "multiple_writers"] == ["info"]


def test_a_resume_and_a_second_file_of_other_tags_stay_one_writer(tmp_path):
    write_events(tmp_path / "resumed", two_writer_events(0, 100, 0.0, 1.0), suffix=".a")
    write_events(tmp_path / "resumed", two_writer_events(50, 100, 200.0, 2.0), suffix=".b")  # after it stopped
    hooks = [event(step, scalar_value("grad_norm", 0.5), wall_time=1_767_000_000.0 + step + 0.5) for step in range(100)]
    write_events(tmp_path / "hooks", two_writer_events(0, 100, 0.0, 1.0), suffix=".a")
    write_events(tmp_path / "hooks", hooks, suffix=".b")
    runs = {run.name: run for run in read_logdir(tmp_path)}
    resumed = runs["resumed"]
    assert list(resumed.scalars) == ["loss"] and resumed.notes == []
    np.testing.assert_array_equal(resumed.scalars["loss"].steps, range(150))
    assert [(b.from_step, b.to_step) for b in resumed.backtracks] == [(99, 50)]
    assert sorted(runs["hooks"].scalars) == ["grad_norm", "loss"] and runs["hooks"].notes == []


def test_a_second_writer_seen_only_later_is_told_apart_then(tmp_path):
    run_dir = tmp_path / "run"
    first = write_events(run_dir, two_writer_events(0, 40, 0.0, 1.0), suffix=".a")
    reader = LogdirReader(tmp_path)
    reader.refresh()
    write_events(run_dir, two_writer_events(0, 40, 0.5, 2.0), suffix=".b")
    reader.refresh()
    with open(first, "ab") as handle:  # the first writer goes on
        handle.write(write_events(tmp_path / "more", two_writer_events(40, 20, 0.0, 1.0)).read_bytes())
    reader.refresh()
    run = reader.run("run")
    assert len(run.scalars["loss"]) == 60 and len(run.scalars["loss (writer 2)"]) == 40
    assert [note.kind for note in run.notes] == ["multiple_writers"]
    from tb_health_plugin.analysis.render import note_text

    (note,) = run.notes
    assert note_text(note, "en") == note.message  # the catalogue's English is the reader's own
    chinese = note_text(note, "zh")
    assert "writer" not in chinese.replace("(writer 2)", "") and "写入" in chinese and "(writer 2)" in chinese


# ----- 8. the heatmap of a run with many parameters


def test_the_heatmap_is_rendered_once_per_data_version_and_its_cache_is_bounded(tmp_path, monkeypatch):
    from tb_health_plugin import service as service_module
    from tb_health_plugin.views import heatmap as heatmap_view

    steps = np.arange(100)
    series = {f"grad_norm/layers.{i}.weight": (steps, np.full(100, 0.1 * (i + 1))) for i in range(300)}
    run_dir = tmp_path / "wide"
    write_scalar_run(run_dir, {tag: (s.tolist(), v.tolist()) for tag, (s, v) in series.items()})
    calls = []
    real = heatmap_view.heatmap
    monkeypatch.setattr(heatmap_view, "heatmap", lambda *args: calls.append(args[1:]) or real(*args))
    monkeypatch.setattr(service_module, "VIEW_CACHE_ENTRIES", 3)
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    client = Client(application.TensorBoardWSGI([plugin]))
    first = get_json(client, "/heatmap?run=wide&width=50")
    assert len(first["layers"]) == 300 and first["end_step"] == 99
    assert get_json(client, "/heatmap?run=wide&width=50") == first
    assert len(calls) == 1  # the second request was served from the cache
    for width in (60, 70, 80, 90):
        get_json(client, f"/heatmap?run=wide&width={width}")
    assert len(plugin._service._views) == 3  # bounded: the least recently used went first
    get_json(client, "/heatmap?run=wide&width=50")
    assert len(calls) == 6  # evicted, so rendered again
    more = write_scalar_run(tmp_path / "more", {"grad_norm/layers.0.weight": ([100], [9.0])})
    with open(next(run_dir.iterdir()), "ab") as handle:
        handle.write(more.read_bytes())
    plugin._service.refresh_now()  # new data: a new version, rendered afresh
    assert get_json(client, "/heatmap?run=wide&width=50")["end_step"] == 100 and len(calls) == 7


def test_a_record_bigger_than_a_read_chunk_right_after_damage_is_read(tmp_path, lying_file, monkeypatch):
    """Found by the framing fuzz test: a resync that lands, at the start of a read chunk, on a
    record longer than the chunk used to stop there for good. Garbage of every length from 1 to
    40 bytes puts the resync on every alignment."""
    from tb_health_plugin.readers import logdir_reader

    source, data, offsets = lying_file
    monkeypatch.setattr(logdir_reader, "READ_CHUNK_BYTES", 40)  # every record is longer than a chunk
    for garbage in range(1, 41):
        run_dir = tmp_path / f"run{garbage}"
        run_dir.mkdir()
        start = offsets[101][0]
        (run_dir / source.name).write_bytes(data[:start] + b"\x13" * garbage + data[start:])
        (run,) = read_logdir(run_dir)
        assert len(run.scalars["loss"]) == 200 and run.skipped_records == 1, garbage


def test_a_tensor_spanning_more_than_the_double_range_gets_finite_buckets(tmp_path):
    """Found by the fuzz campaign: numpy's histogram of [-1e308, 1e308] has NaN edges."""
    ms_event = MsEvent(wall_time=1_767_000_000.0, step=1)
    value = ms_event.summary.value.add(tag="t")
    value.tensor.dims.append(3)
    value.tensor.double_data.extend([-1e308, 0.0, 1e308])
    write_ms(tmp_path / "ms", [ms_event.SerializeToString()])
    (run,) = read_logdir(tmp_path)
    (buckets,) = run.histograms["t"].buckets
    assert np.all(np.isfinite(buckets)) and buckets[:, 2].sum() == 3
    assert buckets[0, 0] == -1e308 and buckets[-1, 1] == 1e308
