"""Truncated and corrupted copies of real event files: skip and count, never stop reading."""

from __future__ import annotations

import shutil
import time
import tracemalloc

import numpy as np

from tb_health_plugin.readers import LogdirReader, read_logdir
from tb_health_plugin.readers.records import scan_records
from tb_health_plugin.tfrecord import masked_crc
from tests.readers_fixtures import record_offsets, write_scalar_run

STEPS = list(range(1, 201))


def _written(tmp_path):
    path = write_scalar_run(tmp_path / "source", {"loss": (STEPS, [float(s) for s in STEPS])})
    return path, path.read_bytes(), record_offsets(path)


def _damaged_run(tmp_path, data: bytes):
    run_dir = tmp_path / "damaged"
    run_dir.mkdir()
    (run_dir / "events.out.tfevents.1.host").write_bytes(data)
    (run,) = read_logdir(run_dir)
    return run


def test_masked_crc_matches_the_crc_stored_by_tensorboards_writer(tmp_path):
    _, data, offsets = _written(tmp_path)
    header, length = offsets[3]
    payload = data[header + 12 : header + 12 + length]
    assert masked_crc(data[header : header + 8]) == int.from_bytes(data[header + 8 : header + 12], "little")
    assert masked_crc(payload) == int.from_bytes(data[header + 12 + length : header + 16 + length], "little")


def test_bad_payload_checksum_skips_that_record_only(tmp_path):
    _, data, offsets = _written(tmp_path)
    damaged = bytearray(data)
    header, length = offsets[51]  # record 0 is the file_version event: this is step 51
    damaged[header + 12 + length // 2] ^= 0xFF
    run = _damaged_run(tmp_path, bytes(damaged))
    assert run.skipped_records == 1
    np.testing.assert_array_equal(run.scalars["loss"].steps, [s for s in STEPS if s != 51])


def test_bad_length_field_resynchronises_on_the_next_record(tmp_path):
    _, data, offsets = _written(tmp_path)
    damaged = bytearray(data)
    header, _ = offsets[100]
    damaged[header + 2] ^= 0x40  # the length now claims ~16 MB; its checksum no longer matches
    run = _damaged_run(tmp_path, bytes(damaged))
    assert run.skipped_records == 1
    np.testing.assert_array_equal(run.scalars["loss"].steps, [s for s in STEPS if s != 100])


def test_undecodable_payload_with_a_valid_checksum_is_skipped_and_counted(tmp_path):
    _, data, offsets = _written(tmp_path)
    header, length = offsets[10]
    garbage = b"\xff" * length  # a truncated varint: no protobuf parser accepts it
    record = data[header : header + 12] + garbage + masked_crc(garbage).to_bytes(4, "little")
    damaged = data[:header] + record + data[header + 16 + length :]
    run = _damaged_run(tmp_path, damaged)
    assert run.skipped_records == 1
    np.testing.assert_array_equal(run.scalars["loss"].steps, [s for s in STEPS if s != 10])


def test_partial_last_record_is_left_for_the_next_read_not_counted(tmp_path):
    source, data, offsets = _written(tmp_path)
    run_dir = tmp_path / "live"
    run_dir.mkdir()
    target = run_dir / source.name
    cut = offsets[-1][0] + 20  # inside the last record's payload
    target.write_bytes(data[:cut])
    reader = LogdirReader(run_dir)
    reader.refresh()
    run = reader.run(".")
    assert run.skipped_records == 0
    assert run.scalars["loss"].steps[-1] == 199
    with open(target, "ab") as handle:
        handle.write(data[cut:])
    assert reader.refresh() is True
    after = reader.run(".")
    assert after.skipped_records == 0 and after.scalars["loss"].steps[-1] == 200
    assert run.scalars["loss"].steps[-1] == 199  # the earlier snapshot did not change


def test_partial_header_is_left_for_the_next_read(tmp_path):
    _, data, offsets = _written(tmp_path)
    cut = offsets[-1][0] + 5
    scan = scan_records(data[:cut])
    assert scan.skipped == 0 and scan.consumed == offsets[-1][0] and not scan.resyncing


def test_length_claiming_more_than_the_file_allocates_nothing_big(tmp_path):
    header = (1 << 62).to_bytes(8, "little")
    data = header + masked_crc(header).to_bytes(4, "little") + b"\x00" * 64
    tracemalloc.start()
    run = _damaged_run(tmp_path, data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10 << 20
    assert run.scalars == {} and run.skipped_records == 0  # could still be a record being written


def test_garbage_tail_after_valid_records_is_counted_once_and_rescanned_when_it_grows(tmp_path):
    source, data, _ = _written(tmp_path)
    run_dir = tmp_path / "tail"
    run_dir.mkdir()
    target = run_dir / source.name
    target.write_bytes(data + b"\x13" * 40)
    reader = LogdirReader(run_dir)
    reader.refresh()
    assert reader.run(".").skipped_records == 1
    more = write_scalar_run(tmp_path / "more", {"loss": ([300], [3.0])}).read_bytes()
    with open(target, "ab") as handle:
        handle.write(more)
    reader.refresh()
    run = reader.run(".")
    assert run.skipped_records == 1
    assert run.scalars["loss"].steps[-1] == 300


def test_incremental_refresh_reads_only_the_appended_bytes(tmp_path, monkeypatch):
    from tb_health_plugin.readers import logdir_reader

    source, data, offsets = _written(tmp_path)
    run_dir = tmp_path / "inc"
    run_dir.mkdir()
    target = run_dir / source.name
    split = offsets[150][0]
    target.write_bytes(data[:split])
    scanned: list[int] = []

    def counting_scan(buf, resyncing=False):
        scanned.append(len(buf))
        return scan_records(buf, resyncing)

    monkeypatch.setattr(logdir_reader, "scan_records", counting_scan)
    reader = LogdirReader(run_dir)
    reader.refresh()
    version = reader.version(".")
    assert reader.refresh() is False and reader.version(".") == version
    with open(target, "ab") as handle:
        handle.write(data[split:])
    scanned.clear()
    assert reader.refresh() is True
    assert sum(scanned) == len(data) - split
    assert reader.version(".") != version
    np.testing.assert_array_equal(reader.run(".").scalars["loss"].steps, STEPS)


def test_snapshot_arrays_are_read_only(tmp_path):
    write_scalar_run(tmp_path, {"loss": ([1, 2], [1.0, 2.0])})
    (run,) = read_logdir(tmp_path)
    assert not run.scalars["loss"].values.flags.writeable


def test_runs_whose_files_vanish_disappear_and_shrunk_files_are_reread(tmp_path):
    write_scalar_run(tmp_path / "a", {"loss": ([1, 2, 3], [1.0, 2.0, 3.0])})
    write_scalar_run(tmp_path / "b", {"loss": ([1], [1.0])})
    reader = LogdirReader(tmp_path)
    reader.refresh()
    shutil.rmtree(tmp_path / "b")
    (path,) = (tmp_path / "a").iterdir()
    path.write_bytes(b"")
    time.sleep(0.01)
    write_scalar_run(tmp_path / "a", {"loss": ([7], [7.0])}, suffix=".later")
    assert reader.refresh() is True
    assert reader.run_names() == ["a"]
    np.testing.assert_array_equal(reader.run("a").scalars["loss"].steps, [7])


def test_unreadable_file_is_counted_once_and_its_run_still_appears(tmp_path):
    path = write_scalar_run(tmp_path / "locked", {"loss": ([1], [1.0])})
    write_scalar_run(tmp_path / "fine", {"loss": ([1], [1.0])})
    path.unlink()
    path.symlink_to(tmp_path / "nowhere")  # listed like a file, open() fails (even for root)
    reader = LogdirReader(tmp_path)
    assert reader.refresh() is True
    assert reader.run_names() == ["fine", "locked"]
    assert reader.run("locked").skipped_records == 1 and reader.run("locked").scalars == {}
    version = reader.version("locked")
    assert reader.refresh() is False and reader.version("locked") == version


def test_records_straddling_read_chunks_and_records_bigger_than_a_chunk(tmp_path, monkeypatch):
    from tb_health_plugin.readers import logdir_reader
    from tests.readers_fixtures import event, tensor_value, write_events

    big = np.arange(3000, dtype=np.float64).reshape(1000, 3)  # a ~24 kB histogram record
    events = [event(s, tensor_value("grad/w", big, "histograms" if s == 0 else None)) for s in range(3)]
    write_events(tmp_path / "run", events, suffix=".0")
    write_scalar_run(tmp_path / "run", {"loss": (STEPS, [float(s) for s in STEPS])}, suffix=".1")
    expected = read_logdir(tmp_path)[0]
    monkeypatch.setattr(logdir_reader, "READ_CHUNK_BYTES", 100)
    (chunked,) = read_logdir(tmp_path)
    assert chunked.skipped_records == 0
    np.testing.assert_array_equal(chunked.scalars["loss"].steps, expected.scalars["loss"].steps)
    assert len(chunked.histograms["grad/w"]) == 3
    np.testing.assert_array_equal(chunked.histograms["grad/w"].buckets[2], big)
