"""`tb-health convert`: real MindSpore logs become tfevents that TensorBoard itself reads."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tb_health_plugin.cli import main
from tb_health_plugin.readers import read_logdir
from tests.readers_fixtures import mindspore_training_logs, write_scalar_run

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def mindspore_logs(tmp_path_factory):
    return mindspore_training_logs(tmp_path_factory)


def _accumulate(folder):
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_tensorboard_reads_converted_scalars_histograms_and_distributions(mindspore_logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(mindspore_logs), str(out)]) == 0
    assert "converted 2 run(s)" in capsys.readouterr().out
    source = {run.name: run for run in read_logdir(mindspore_logs)}

    collector = _accumulate(out / "collector")
    tags = collector.Tags()
    assert tags["scalars"] == ["loss/auto"]
    assert set(tags["histograms"]) == {"bias/auto", "weight/auto"} == set(tags["distributions"])
    loss = collector.Scalars("loss/auto")
    np.testing.assert_array_equal([e.step for e in loss], source["collector"].scalars["loss/auto"].steps)
    np.testing.assert_allclose([e.value for e in loss], source["collector"].scalars["loss/auto"].values, rtol=1e-6)
    weights = collector.Histograms("weight/auto")
    assert [h.histogram_value.num for h in weights] == [4.0] * len(weights)

    record = _accumulate(out / "record")
    assert set(record.Tags()["scalars"]) == {"loss", "lr", "w/nan_count", "w/inf_count"}
    assert [e.value for e in record.Scalars("w/inf_count")] == [2.0] * 5
    events = list(EventFileLoader(str(next((out / "record").glob("*tfevents*")))).Load())
    assert sum(1 for e in events if e.HasField("summary")) == 5  # one event per step, as MindSpore wrote


def test_converted_logs_read_back_as_the_same_series(mindspore_logs, tmp_path):
    out = tmp_path / "out"
    assert main(["convert", str(mindspore_logs), str(out), "--quiet"]) == 0
    original = {run.name: run for run in read_logdir(mindspore_logs)}
    converted = {run.name: run for run in read_logdir(out)}
    assert set(converted) == set(original) == {"collector", "record"}
    for name, run in original.items():
        for tag, series in run.scalars.items():
            np.testing.assert_array_equal(converted[name].scalars[tag].steps, series.steps)
            np.testing.assert_allclose(converted[name].scalars[tag].values, series.values, rtol=1e-6)
            np.testing.assert_array_equal(converted[name].scalars[tag].wall_times, series.wall_times)
        for tag, series in run.histograms.items():
            for ours, theirs in zip(converted[name].histograms[tag].buckets, series.buckets, strict=True):
                # TensorBoard rebuilds a left edge as the previous right one (left + width): float32-close
                np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_converting_in_place_does_not_make_our_reader_count_points_twice(mindspore_logs, tmp_path):
    import shutil

    logs = tmp_path / "logs"
    shutil.copytree(mindspore_logs, logs)
    for path in logs.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    before = {run.name: run for run in read_logdir(logs)}
    assert main(["convert", str(logs), str(logs), "--quiet"]) == 0
    after = {run.name: run for run in read_logdir(logs)}
    assert after["collector"].backtracks == [] and len(after["collector"].scalars["loss/auto"]) == len(
        before["collector"].scalars["loss/auto"])
    assert _accumulate(logs / "collector").Tags()["scalars"] == ["loss/auto"]  # TensorBoard sees the copy


def test_usage_errors_exit_2_and_nothing_to_convert_exits_1(mindspore_logs, tmp_path, capsys):
    assert main(["convert", str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["convert", str(a_file), str(tmp_path / "out")]) == 2
    assert "not a directory" in capsys.readouterr().err
    write_scalar_run(tmp_path / "tf_only", {"loss": ([1], [1.0])})
    assert main(["convert", str(tmp_path / "tf_only"), str(tmp_path / "out")]) == 1
    assert "no MindSpore summary files" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["convert", str(mindspore_logs)])
    assert usage.value.code == 2


def test_an_earlier_conversion_is_kept_unless_overwrite(mindspore_logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(mindspore_logs), str(out), "--quiet"]) == 0
    assert main(["convert", str(mindspore_logs), str(out), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["convert", str(mindspore_logs), str(out), "--overwrite", "--progress", "always"]) == 0
    captured = capsys.readouterr()
    assert "[1/2] collector" in captured.err and "[2/2] record" in captured.err
    assert len(list((out / "collector").glob("*tfevents*"))) == 1


def test_progress_inside_a_big_run_is_reported_as_bytes_are_read(mindspore_logs, tmp_path, capsys, monkeypatch):
    from tb_health_plugin.commands import convert
    from tb_health_plugin.readers import logdir_reader

    monkeypatch.setattr(convert, "PROGRESS_EVERY_BYTES", 200)
    monkeypatch.setattr(logdir_reader, "READ_CHUNK_BYTES", 256)
    assert main(["convert", str(mindspore_logs), str(tmp_path / "out"), "--progress", "always"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(line.strip().startswith("read ") for line in lines)
    assert lines[0].startswith("[1/2] collector") and lines[0].endswith("(0% done)")


def test_an_unreadable_summary_file_is_one_line_and_exit_2_the_rest_converted(mindspore_logs, tmp_path, capsys):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(mindspore_logs, src, symlinks=True)
    (src / "looped").mkdir()
    loop = src / "looped" / "events.out.events.summary.1.0.host_MS"
    loop.symlink_to(loop.name)  # a symlink to itself: ELOOP for anyone, root included
    code = main(["convert", str(src), str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err
    assert f"tb-health convert: skipping unreadable event file {loop} (Too many levels of symbolic links)" in captured.err
    assert "converted 3 run(s)" in captured.out and (tmp_path / "out" / "collector").is_dir()


HAN = re.compile(r"[\u4e00-\u9fff]")


def _looped_copy(mindspore_logs, tmp_path):
    """A copy of the logs with one summary file that cannot be read (a symlink to itself: ELOOP)."""
    src = tmp_path / "src"
    shutil.copytree(mindspore_logs, src, symlinks=True)
    (src / "looped").mkdir()
    loop = src / "looped" / "events.out.events.summary.1.0.host_MS"
    loop.symlink_to(loop.name)
    return src, loop


def test_convert_speaks_chinese_with_lang_zh(mindspore_logs, tmp_path, capsys):
    src, loop = _looped_copy(mindspore_logs, tmp_path)
    out = tmp_path / "out"
    assert main(["convert", str(src), str(out), "--lang", "zh", "--progress", "always"]) == 2
    captured = capsys.readouterr()
    (summary,) = captured.out.splitlines()
    assert summary.startswith("已转换 3 个运行：") and f"写入 {out}，用时 " in summary
    assert "converted" not in summary and "{" not in summary and HAN.search(summary)
    lines = captured.err.splitlines()
    assert lines[0].startswith("[1/3] collector：") and lines[0].endswith("（已完成 0%）")
    assert f"tb-health convert: 跳过无法读取的事件文件 {loop} (Too many levels of symbolic links)" in lines
    assert lines[-1] == f"tb-health convert: {src} 下有 1 个无法读取的路径未转换（退出码 2）"
    assert not any("done" in line or "unreadable" in line for line in lines)

    assert main(["convert", str(src), str(out), "--lang", "zh"]) == 2
    refused = capsys.readouterr().err.strip()
    assert refused.startswith(f"tb-health convert: 错误：{out}") and refused.endswith(" 来自之前的一次转换；使用 --overwrite 替换它")
    assert main(["convert", str(tmp_path / "missing"), str(out), "--lang", "zh"]) == 2
    assert capsys.readouterr().err.strip() == f"tb-health convert: 错误：SRC {tmp_path / 'missing'} 不存在"


def test_the_locale_chooses_the_language_and_english_keeps_its_words(mindspore_logs, tmp_path, capsys, monkeypatch):
    src, _ = _looped_copy(mindspore_logs, tmp_path)
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert main(["convert", str(src), str(tmp_path / "zh"), "--quiet"]) == 2
    assert "个无法读取的路径" in capsys.readouterr().err
    monkeypatch.setenv("LC_ALL", "C")
    assert main(["convert", str(src), str(tmp_path / "en")]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1] == f"tb-health convert: 1 unreadable path under {src} left out (exit 2)"
    assert re.fullmatch(r"converted 3 run\(s\): \d+ scalar and \d+ histogram points( and 1 network graph)? "
                        rf"into {re.escape(str(tmp_path / 'en'))} in \d+\.\d s( \(\d+ damaged records skipped\))?",
                        captured.out.strip())


@pytest.mark.parametrize("graphs, skipped, empty, tail", [
    (0, 0, 0, " into out in 1.5 s"),
    (1, 0, 0, " and 1 network graph into out in 1.5 s"),
    (2, 3, 0, " and 2 network graphs into out in 1.5 s (3 damaged records skipped)"),
    (0, 0, 4, " into out in 1.5 s (4 histograms without finite values left out)"),
    (0, 1, 4, " into out in 1.5 s (1 damaged records skipped; 4 histograms without finite values left out)"),
])
def test_the_english_summary_reads_word_for_word_as_before_the_catalogue(graphs, skipped, empty, tail):
    from tb_health_plugin.commands.convert import _summary

    line = _summary("en", runs=2, scalars=10, histograms=5, graphs=graphs, dst="out", seconds=1.5,
                    skipped=skipped, empty=empty)
    assert line == "converted 2 run(s): 10 scalar and 5 histogram points" + tail
    chinese = _summary("zh", runs=2, scalars=10, histograms=5, graphs=graphs, dst="out", seconds=1.5,
                       skipped=skipped, empty=empty)
    assert chinese.startswith("已转换 2 个运行：10 个标量点和 5 个直方图点") and "{" not in chinese
    assert (f"{graphs} 个网络图" in chinese) == bool(graphs)
    assert (f"跳过了 {skipped} 条" in chinese) == bool(skipped) and (f"{empty} 个没有有限值" in chinese) == bool(empty)


def test_run_names_in_progress_and_summary_are_printed_with_control_characters_escaped(mindspore_logs, tmp_path,
                                                                                       capsys):
    """A folder name comes from whoever can write under SRC: an ANSI escape or a newline in it
    must not recolour the terminal or forge a line (as in `check`)."""
    src = tmp_path / "src"
    shutil.copytree(mindspore_logs / "record", src / "red\x1b[31m\nconverted 9 run(s)")
    out = tmp_path / "out\x1b[0m"
    assert main(["convert", str(src), str(out), "--progress", "always", "--lang", "en"]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.err + captured.out
    assert captured.err.splitlines()[0].startswith("[1/1] red\\x1b[31m\\nconverted 9 run(s): ")
    assert len(captured.out.splitlines()) == 1 and "out\\x1b[0m" in captured.out
