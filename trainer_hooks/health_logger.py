"""The framework-neutral core of the hooks: one object that turns per-step values into the tags
the README lists ("What is logged"), keeps the window aggregates, and runs the online analysis.

`HealthMonitor` (MindSpore `Model.train`), the MindFormers callback and custom training loops
all feed it; a custom loop calls `log_step` once per step. Values may be Python numbers, numpy
arrays or MindSpore tensors; nothing here imports MindSpore unless such tensors are passed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tb_health_plugin import contract
from trainer_hooks.aggregates import StepWindow
from trainer_hooks.online import SEVERITY_RANK, Analyze, OnlineAnalyzer
from trainer_hooks.ranks import RankInfo, detect_rank
from trainer_hooks.writer import SafeEventWriter

logger = logging.getLogger("trainer_hooks")

FINDINGS_TAG = contract.FINDINGS
NOTES_TAG = contract.NOTES
MS_PER_S = 1000.0


def _positive_int(name: str, value: Any, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        hint = "a positive integer" + (" (or 0 to turn it off)" if allow_zero else "")
        raise ValueError(f"{name} must be {hint}, got {value!r}")


def to_float(value: Any) -> float:
    """A Python float from a number, a numpy value or a one-element MindSpore tensor (the first
    element of a bigger one); ValueError for an empty or non-numeric value."""
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    flat = np.asarray(value, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        raise ValueError("expected a number, got an empty array")
    return float(flat[0])


def to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    return np.asarray(value)


class HealthLogger:
    """Writes the health tags of one rank to `<log_dir>/rank_<id>/`.

    Args:
        log_dir: root folder of the logs; this rank writes into `rank_<id>/` below it.
        collect_freq: write scalars at the first step (step 1, or the first after a resume:
            the run's starting point) and every this many steps. Every step's loss, gradient norm and overflow flag still feed the window
            aggregates (`train/loss_max`, `train/loss_min`, `train/grad_norm_max`,
            `train/nonfinite_count`, `train/overflow_count`), so no spike is lost.
        weight_freq: every this many steps log `weight_norm/<param>` and `update_ratio/<param>`
            (needs `parameters`; copies the weights to the host at that step and the one
            before). 0 turns it off.
        histogram_freq: every this many steps log `weight/<param>` (and `grad/<param>` when
            gradients are passed) histograms. 0 turns it off.
        histogram_ranks: ranks that log histograms (`None`: all). Default: rank 0 only.
        parameters: the trained parameters (a MindSpore `Cell` or a list of `Parameter`s, or a
            mapping name -> array-like); names label per-parameter tags.
        batch_size: samples per step, for `train/throughput` (samples/s).
        seq_length: tokens per sample, for `train/tokens_per_s`.
        online_analysis: run the project's detectors every `analyze_every` collections in a
            background thread and write new findings as `health/findings` text. It keeps at
            most `trainer_hooks.online.MAX_POINTS_PER_TAG` points per tag (192 KiB a tag).
        analyze_every: collections between two online analyses.
        stop_on_critical: when a critical finding appears, `should_stop` becomes true (the
            MindSpore callbacks then call `run_context.request_stop()`). A non-finite loss, or a
            non-finite gradient norm on a step the loss scaler did not flag as an overflow (so
            its update was applied), sets it at that very step, without waiting for the
            analysis; the step is then logged in full.
        findings_min_severity: the least severity written and printed ("info", "warning",
            "critical").
        rank, world_size: override the detected rank (see `trainer_hooks.ranks`).
        flush_secs: how often the writer thread flushes the file to disk.
        analyze: the analysis function (RunData -> run report); default: the project's engine.
        graph: the network's graph, written once at the start for TensorBoard's Graphs tab: a
            TensorBoard `GraphDef` or MindSpore's graph (`cell.get_func_graph_proto()` of a
            compiled cell; `trainer_hooks.graph.compile_graph(cell, *inputs)` compiles one).
            See `log_graph`.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        collect_freq: int = 10,
        *,
        weight_freq: int = 50,
        histogram_freq: int = 100,
        histogram_ranks: Sequence[int] | None = (0,),
        parameters: Any = None,
        batch_size: int | None = None,
        seq_length: int | None = None,
        online_analysis: bool = True,
        analyze_every: int = 10,
        stop_on_critical: bool = False,
        findings_min_severity: str = "warning",
        rank: int | None = None,
        world_size: int | None = None,
        flush_secs: float = 10.0,
        analyze: Analyze | None = None,
        graph: Any = None,
    ) -> None:
        self.check_options(
            log_dir=log_dir,
            collect_freq=collect_freq,
            weight_freq=weight_freq,
            histogram_freq=histogram_freq,
            analyze_every=analyze_every,
            batch_size=batch_size,
            seq_length=seq_length,
            findings_min_severity=findings_min_severity,
            flush_secs=flush_secs,
        )
        self.collect_freq = collect_freq
        self.weight_freq = weight_freq
        self.histogram_freq = histogram_freq
        detected = detect_rank()
        self.rank_info = RankInfo(
            detected.rank if rank is None else int(rank),
            detected.world_size if world_size is None else int(world_size),
            detected.source if rank is None else "argument",
        )
        self.log_dir = os.path.join(os.fspath(log_dir), self.rank_info.run_folder)
        self.histogram_ranks = None if histogram_ranks is None else {int(r) for r in histogram_ranks}
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.stop_on_critical = stop_on_critical
        self.should_stop = False
        self.parameters = named_parameters(parameters)
        self.writer = SafeEventWriter(self.log_dir, flush_secs=flush_secs)
        self.online = (
            OnlineAnalyzer(self.rank_info.run_folder, self._report_findings, analyze_every, findings_min_severity, analyze)
            if online_analysis
            else None
        )
        self.loss_window = StepWindow()
        self.grad_norm_window = StepWindow()
        self.overflow_steps = 0
        self._notes: set[str] = set()
        self._last_time: float | None = None
        self._timed_seconds = 0.0
        self._timed_steps = 0
        self._host_seconds = 0.0
        self._step_ended: float | None = None
        self._weight_snapshot: tuple[int, dict[str, np.ndarray]] | None = None
        self._last_step: int | None = None
        self._pending_collection = False
        self._grad_stats_fn = None
        self._has_overflow_flag = False
        self._input_errors: set[tuple[str, str]] = set()
        self._closed = False
        if graph is not None:
            self.log_graph(graph)

    @staticmethod
    def check_options(
        log_dir: Any,
        collect_freq: Any = 10,
        weight_freq: Any = 50,
        histogram_freq: Any = 100,
        analyze_every: Any = 10,
        batch_size: Any = None,
        seq_length: Any = None,
        findings_min_severity: Any = "warning",
        flush_secs: Any = 10.0,
        **_ignored: Any,
    ) -> None:
        """Raise `ValueError` saying what to change when an option is unusable."""
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise ValueError(f"log_dir must be a folder path (str or Path), got {log_dir!r}")
        _positive_int("collect_freq", collect_freq)
        _positive_int("weight_freq", weight_freq, allow_zero=True)
        _positive_int("histogram_freq", histogram_freq, allow_zero=True)
        _positive_int("analyze_every", analyze_every)
        for name, value in (("batch_size", batch_size), ("seq_length", seq_length)):
            if value is not None:
                _positive_int(name, value)
        if findings_min_severity not in SEVERITY_RANK:
            raise ValueError(
                f"findings_min_severity must be one of {list(SEVERITY_RANK)}, got {findings_min_severity!r}"
            )
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, (int, float)) or flush_secs <= 0:
            raise ValueError(f"flush_secs must be a positive number of seconds, got {flush_secs!r}")

    # ----- what a step logs

    def is_collect_step(self, step: int) -> bool:
        """The first step logged (step 1, or the first after a resume: where the run starts
        from) and every `collect_freq`-th step."""
        return step == 1 or self._last_step is None or step % self.collect_freq == 0

    def wants_weights(self, step: int) -> bool:
        """Whether the weights are read at this step: a weight step, the step just before one
        (for the update ratio) or a histogram step."""
        if not self.parameters:
            return False
        near_weight_step = self.weight_freq and (step % self.weight_freq == 0 or (step + 1) % self.weight_freq == 0)
        return bool(near_weight_step) or self._is_histogram_step(step)

    def log_step(
        self,
        step: int,
        loss: Any,
        *,
        grads: Sequence[Any] | None = None,
        grad_stats: Any = None,
        grad_norm: Any = None,
        param_grad_norms: Mapping[str, Any] | None = None,
        lr: Any = None,
        loss_scale: Any = None,
        overflow: Any = None,
        batch_size: int | None = None,
        steps_done: int = 1,
        window: Mapping[str, float] | None = None,
    ) -> None:
        """Record one training step (`step` counts from 1, the step just finished).

        `grads`: the gradients of `parameters` (same order); their norms are computed on the
        device, one small tensor comes back. `grad_stats`: the vector returned by
        `trainer_hooks.grad_norm_stats(grads)` inside your own jitted step (cheaper). Or give
        `grad_norm` and/or `param_grad_norms` directly. `lr`: the rate used by THIS step.
        `steps_done`: steps run since the previous call (sink mode runs several per call).
        `window`: aggregates of those steps computed on the device (`steps`, `loss_max`,
        `loss_min`, `grad_norm_max`, `nonfinite_count`, `overflow_count`; NaN max/min for
        none); they replace this call's single values in the window aggregates.

        Never raises: a value that cannot be read (an empty array, a string...) skips this call
        with one warning per kind of problem, and training goes on.
        """
        if self._closed:
            return
        try:
            self._log_step(step, loss, grads, grad_stats, grad_norm, param_grad_norms, lr, loss_scale, overflow,
                           batch_size, steps_done, window)
        except Exception as error:  # noqa: BLE001 - nothing the user passes may stop training
            self._input_error("log_step", step, error)

    def _log_step(self, step, loss, grads, grad_stats, grad_norm, param_grad_norms, lr, loss_scale, overflow,
                  batch_size, steps_done, window) -> None:
        now = time.perf_counter()
        if self._last_time is not None:
            self._timed_seconds += now - self._last_time
            self._timed_steps += steps_done
        self._last_time = now
        loss_value = to_float(loss)
        if grads is not None and grad_stats is None:
            grad_stats = self._grad_stats(grads)
        if grad_stats is not None:
            stats = to_numpy(grad_stats).astype(np.float64).reshape(-1)
            grad_norm = stats[0]
            names = self.param_names(len(stats) - 1)
            param_grad_norms = dict(zip(names, stats[1:], strict=True))
        grad_norm_value = None if grad_norm is None else to_float(grad_norm)
        if window is not None:
            self._merge_window(window)
        else:
            self.loss_window.add(loss_value)
            if grad_norm_value is not None:
                self.grad_norm_window.add(grad_norm_value)
            if overflow is not None and to_float(overflow):
                self.overflow_steps += 1
        collect = self.is_collect_step(step)
        self._last_step = step
        stop_now = self._nonfinite_update(loss_value, grad_norm_value, overflow, window)
        if stop_now or collect:
            self._collect(step, loss_value, grad_norm_value, param_grad_norms, lr, loss_scale, overflow, batch_size)
        else:
            self._pending_collection = True
        if self.wants_weights(step):
            self._log_weights(step)
        if grads is not None and self._is_histogram_step(step):
            names = self.param_names(len(grads))
            for name, grad in zip(names, grads, strict=True):
                self.writer.histogram(contract.GRAD_HISTOGRAM_PREFIX + name, to_numpy(grad), step)
        if stop_now:
            self._stop_now(step, loss_value, grad_norm_value)

    def _nonfinite_update(self, loss_value: float, grad_norm_value: float | None, overflow: Any, window) -> bool:
        """With `stop_on_critical`: whether this step's loss is non-finite, or its gradient norm
        is on a step whose update was applied. A non-finite gradient norm on a step the loss
        scaler flagged as an overflow was skipped (update thrown away, scale lowered): that is
        dynamic loss scaling working, not damage."""
        if not self.stop_on_critical or self.should_stop:
            return False
        if window is not None:
            # several steps at once (sink mode): the cell counted non-finite losses plus norms,
            # and (with loss scaling, when `overflow` is passed) the norms that were overflows
            skipped = int(window.get("overflow_count", 0)) if overflow is not None else 0
            return int(window.get("nonfinite_count", 0)) > skipped
        if not math.isfinite(loss_value):
            return True
        skipped = overflow is not None and bool(to_float(overflow))
        return grad_norm_value is not None and not math.isfinite(grad_norm_value) and not skipped

    def _stop_now(self, step: int, loss_value: float, grad_norm_value: float | None) -> None:
        self.should_stop = True
        message = (
            f"non-finite training values at step {step} (loss {loss_value}, gradient norm {grad_norm_value}); "
            "stopping at this step (stop_on_critical=True)"
        )
        logger.error("tb-health: %s", message)
        self.writer.text(NOTES_TAG, message, step)
        self.writer.flush()

    def _input_error(self, where: str, step: int, error: Exception) -> None:
        """Warn once per kind of problem in what the training passed; the call is skipped."""
        key = (where, type(error).__name__)
        if key in self._input_errors:
            return
        self._input_errors.add(key)
        message = (
            f"tb-health: {where} at step {step} skipped: {type(error).__name__}: {error} "
            "(later calls with the same problem are skipped silently; training continues)"
        )
        logger.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def step_ended(self) -> None:
        """Mark the end of a step's callbacks; the time until `step_begins` is host time."""
        self._step_ended = time.perf_counter()

    def step_begins(self) -> None:
        """Mark the start of the next step: the time since `step_ended` (data loading, host work
        outside the compiled step) is logged as `train/host_time_ms`, averaged per step over the
        window like step time. In synchronous data parallelism it is the only per-rank time that
        differs: every rank's step time includes waiting for the slowest."""
        if self._step_ended is not None:
            self._host_seconds += time.perf_counter() - self._step_ended
            self._step_ended = None

    def log_eval(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Evaluation metrics as `eval/<name>` (e.g. {"loss": 0.3, "accuracy": 0.9})."""
        for name, value in metrics.items():
            try:
                self._scalar(contract.EVAL_PREFIX + name, to_float(value), step)
            except Exception as error:  # noqa: BLE001 - a metric that is not a number is skipped
                self._input_error(f"log_eval({name!r})", step, error)

    def note(self, step: int, message: str) -> None:
        """Say once, in the logs (`health/notes`) and on the console, what cannot be logged."""
        if message in self._notes:
            return
        self._notes.add(message)
        logger.info("tb-health: %s", message)
        self.writer.text(NOTES_TAG, message, step)

    def log_graph(self, graph: Any) -> bool:
        """Write the network's graph (see `graph` in the class docstring) for TensorBoard's
        Graphs tab. Never raises: a graph that cannot be converted is warned about and skipped.
        True when it was written."""
        if self._closed:
            return False
        try:
            from trainer_hooks.graph import to_graph_def

            graph_def = to_graph_def(graph)
        except Exception as error:  # noqa: BLE001 - a bad graph must not stop training
            self._input_error("log_graph", self._last_step or 0, error)
            return False
        self.writer.graph(graph_def)
        return True

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        """Write the last partial window, run a final analysis, close the file. Idempotent."""
        if self._closed:
            return
        try:
            if self._pending_collection and self._last_step is not None:
                self._write_window(self._last_step)
                if self.online is not None:
                    self.online.collection_done()
            if self.online is not None:
                self.online.finish()
        finally:
            self._closed = True
            self.writer.close()

    def __enter__(self) -> HealthLogger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ----- internals

    def _merge_window(self, window: Mapping[str, float]) -> None:
        steps = int(window["steps"])
        # the grad-norm non-finite count is folded into the loss window's: they are logged summed
        self.loss_window.merge(steps, float(window["loss_max"]), float(window["loss_min"]), int(window["nonfinite_count"]))
        self.grad_norm_window.merge(steps, float(window["grad_norm_max"]), math.nan, 0)
        self.overflow_steps += int(window.get("overflow_count", 0))

    def _collect(self, step, loss_value, grad_norm_value, param_grad_norms, lr, loss_scale, overflow, batch_size):
        self._scalar(contract.LOSS, loss_value, step)
        if grad_norm_value is not None:
            self._scalar(contract.GRAD_NORM, grad_norm_value, step)
        for name, value in (param_grad_norms or {}).items():
            self._scalar(contract.PARAM_GRAD_NORM_PREFIX + name, to_float(value), step)
        if lr is not None:
            self._scalar(contract.LEARNING_RATE, to_float(lr), step)
        if loss_scale is not None:
            self._scalar(contract.LOSS_SCALE, to_float(loss_scale), step)
        if overflow is not None:
            self._scalar(contract.OVERFLOW, to_float(overflow), step)
            self._has_overflow_flag = True
        self._write_window(step, batch_size)
        if self.online is not None:
            self.online.collection_done()

    def _write_window(self, step: int, batch_size: int | None = None) -> None:
        self._pending_collection = False
        self._scalar(contract.LOSS_MAX, self.loss_window.maximum, step)
        self._scalar(contract.LOSS_MIN, self.loss_window.minimum, step)
        nonfinite = self.loss_window.nonfinite_count
        if self.grad_norm_window.count:
            self._scalar(contract.GRAD_NORM_MAX, self.grad_norm_window.maximum, step)
            nonfinite += self.grad_norm_window.nonfinite_count
        self._scalar(contract.NONFINITE_COUNT, nonfinite, step)
        if self._has_overflow_flag:
            self._scalar(contract.OVERFLOW_COUNT, self.overflow_steps, step)
        self.overflow_steps = 0
        self.loss_window.reset()
        self.grad_norm_window.reset()
        if self._timed_steps:
            seconds_per_step = self._timed_seconds / self._timed_steps
            self._scalar(contract.STEP_TIME_MS, seconds_per_step * MS_PER_S, step)
            samples = batch_size or self.batch_size
            if samples and seconds_per_step > 0:
                self._scalar(contract.THROUGHPUT, samples / seconds_per_step, step)
                if self.seq_length:
                    self._scalar(contract.TOKENS_PER_S, samples * self.seq_length / seconds_per_step, step)
            if self._host_seconds:
                self._scalar(contract.HOST_TIME_MS, self._host_seconds / self._timed_steps * MS_PER_S, step)
        self._timed_seconds, self._timed_steps, self._host_seconds = 0.0, 0, 0.0

    def _scalar(self, tag: str, value: float, step: int) -> None:
        wall_time = time.time()
        self.writer.scalar(tag, value, step, wall_time)
        if self.online is not None:
            self.online.record_scalar(tag, step, value, wall_time)

    def _log_weights(self, step: int) -> None:
        weights = {name: to_numpy(p).astype(np.float64) for name, p in self.parameters.items()}
        if self.weight_freq and step % self.weight_freq == 0:
            previous, self._weight_snapshot = self._weight_snapshot, None
            for name, value in weights.items():
                self._scalar(contract.PARAM_WEIGHT_NORM_PREFIX + name, float(np.linalg.norm(value.ravel())), step)
                if previous is not None and previous[0] == step - 1 and name in previous[1]:
                    before = previous[1][name]
                    before_norm = float(np.linalg.norm(before.ravel()))
                    update = float(np.linalg.norm((value - before).ravel()))
                    ratio = update / before_norm if before_norm > 0 else (0.0 if update == 0 else math.inf)
                    self._scalar(contract.PARAM_UPDATE_RATIO_PREFIX + name, ratio, step)
        if self._is_histogram_step(step):
            for name, value in weights.items():
                self.writer.histogram(contract.WEIGHT_HISTOGRAM_PREFIX + name, value, step)
        if self.weight_freq and (step + 1) % self.weight_freq == 0:
            self._weight_snapshot = (step, weights)  # the weights before the next weight step

    def _is_histogram_step(self, step: int) -> bool:
        return bool(self.histogram_freq) and step % self.histogram_freq == 0 and self._logs_histograms()

    def _logs_histograms(self) -> bool:
        return self.histogram_ranks is None or self.rank_info.rank in self.histogram_ranks

    def param_names(self, count: int) -> list[str]:
        """Names of the watched parameters, or `param_<i>` when `count` does not match them."""
        names = list(self.parameters)
        if len(names) == count:
            return names
        return [f"param_{i}" for i in range(count)]

    def _grad_stats(self, grads):
        if self._grad_stats_fn is None:
            from trainer_hooks.norms import jitted_grad_norm_stats

            self._grad_stats_fn = jitted_grad_norm_stats()
        return self._grad_stats_fn(*grads)

    def _report_findings(self, findings: list[dict]) -> None:
        for finding in findings:
            text = json.dumps(finding, sort_keys=True)
            self.writer.text(FINDINGS_TAG, text, int(finding.get("step", 0)))
            level = logging.ERROR if finding.get("severity") == "critical" else logging.WARNING
            logger.log(
                level,
                "tb-health [%s] %s at step %s (%s): %s",
                finding.get("severity"),
                finding.get("kind"),
                finding.get("step"),
                finding.get("tag"),
                finding.get("message"),
            )
            if self.stop_on_critical and finding.get("severity") == "critical":
                self.should_stop = True
        self.writer.flush()


def named_parameters(parameters: Any) -> dict[str, Any]:
    """name -> parameter from a Cell, a list of Parameters or a mapping (empty for None)."""
    if parameters is None:
        return {}
    if isinstance(parameters, Mapping):
        return dict(parameters)
    if hasattr(parameters, "trainable_params"):
        parameters = parameters.trainable_params()
    named = {}
    for index, parameter in enumerate(parameters):
        named[str(getattr(parameter, "name", f"param_{index}"))] = parameter
    return named
