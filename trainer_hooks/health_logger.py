"""The framework-neutral core of the hooks: one object that turns per-step values into the tags
the README lists ("What is logged"), keeps the window aggregates, and runs the online analysis.

`HealthMonitor` (MindSpore `Model.train`), the MindFormers callback and custom training loops
all feed it; a custom loop calls `log_step` once per step. Values may be Python numbers, numpy
arrays or MindSpore tensors; nothing here imports MindSpore unless such tensors are passed.
Each job has its module: the options (`options`), reading values (`values`), the window
aggregates (`aggregates`), timing (`timing`), weights (`weights`), stopping (`stopping`), what
is said to the user (`notices`), the writer (`writer`) and the online analysis (`online`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tb_health_plugin import contract
from tb_health_plugin.contract import SEVERITY_RANK
from tb_health_plugin.i18n import default_language
from trainer_hooks.aggregates import HealthWindow
from trainer_hooks.notices import Notices
from trainer_hooks.online import OnlineAnalyzer
from trainer_hooks.options import HealthOptions
from trainer_hooks.ranks import RankInfo, detect_rank
from trainer_hooks.stopping import nonfinite_update
from trainer_hooks.timing import StepClock
from trainer_hooks.values import named_parameters, to_float, to_numpy
from trainer_hooks.weights import WeightTracker
from trainer_hooks.writer import SafeEventWriter

__all__ = ["HealthLogger", "HealthOptions", "named_parameters", "to_float", "to_numpy"]


class HealthLogger:
    """Writes the health tags of one rank to `<log_dir>/rank_<id>/`.

    Takes the fields of `HealthOptions` as arguments, `HealthLogger(log_dir, collect_freq=10,
    batch_size=32)`, or `options=HealthOptions(...)`; and `parameters`, the trained parameters
    (a MindSpore `Cell`, a list of `Parameter`s or a mapping name -> array-like), whose names
    label the per-parameter tags and whose weights feed the weight tags. `graph`: the network's
    graph, written once at the start for TensorBoard's Graphs tab: a TensorBoard `GraphDef` or
    MindSpore's graph (`cell.get_func_graph_proto()` of a compiled cell;
    `trainer_hooks.graph.compile_graph(cell, *inputs)` compiles one); see `log_graph`.
    """

    def __init__(
        self,
        *args: Any,
        parameters: Any = None,
        graph: Any = None,
        options: HealthOptions | None = None,
        **fields: Any,
    ) -> None:
        if options is None:
            options = HealthOptions(*args, **fields)
        elif args or fields:
            raise TypeError("give either options=HealthOptions(...) or its fields, not both")
        self.options = options
        detected = detect_rank()
        self.rank_info = RankInfo(
            detected.rank if options.rank is None else options.rank,
            detected.world_size if options.world_size is None else options.world_size,
            detected.source if options.rank is None else "argument",
        )
        self.log_dir = os.path.join(os.fspath(options.log_dir), self.rank_info.run_folder)
        self.should_stop = False
        self.parameters = named_parameters(parameters)
        self.writer = SafeEventWriter(self.log_dir, flush_secs=options.flush_secs)
        self.notices = Notices(self.writer)
        self.lang = options.lang or default_language()  # of the findings printed, written and sent
        self.online = (
            OnlineAnalyzer(
                self.rank_info.run_folder,
                self._on_findings,
                options.analyze_every,
                options.findings_min_severity,
                options.analyze,
                lang=self.lang,
                on_analysed=self._on_analysed,
            )
            if options.online_analysis
            else None
        )
        self.window = HealthWindow()
        self.clock = StepClock()
        self.weights = WeightTracker(self.parameters, options.weight_freq)
        self._last_step: int | None = None
        self._pending_collection = False
        self._grad_stats_fn = None
        self._closed = False
        self._notify, self._close_notify = self._notifications(options)
        if graph is not None:
            self.log_graph(graph)

    # ----- what a step logs

    def is_collect_step(self, step: int) -> bool:
        """The first step logged (step 1, or the first after a resume: where the run starts
        from) and every `collect_freq`-th step."""
        return step == 1 or self._last_step is None or step % self.options.collect_freq == 0

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
            self.notices.input_error("log_step", step, error)

    def _log_step(self, step, loss, grads, grad_stats, grad_norm, param_grad_norms, lr, loss_scale, overflow,
                  batch_size, steps_done, window) -> None:
        self.clock.step_logged(steps_done)
        loss_value = to_float(loss)
        if grads is not None and grad_stats is None:
            grad_stats = self._grad_stats(grads)
        stats = None
        if grad_stats is not None:
            stats = to_numpy(grad_stats).astype(np.float64).reshape(-1)
            grad_norm = stats[0]
        grad_norm_value = None if grad_norm is None else to_float(grad_norm)
        overflowed = None if overflow is None else bool(to_float(overflow))
        if window is not None:
            self.window.merge(window)
        else:
            self.window.add_step(loss_value, grad_norm_value, bool(overflowed))
        collect = self.is_collect_step(step)
        self._last_step = step
        stop_now = (
            self.options.stop_on_critical
            and not self.should_stop
            and nonfinite_update(loss_value, grad_norm_value, overflowed, window)
        )
        if stop_now or collect:
            if stats is not None:  # per-parameter norms are written at collections and at a stop step
                param_grad_norms = dict(zip(self.param_names(len(stats) - 1), stats[1:], strict=True))
            self._collect(step, loss_value, grad_norm_value, param_grad_norms, lr, loss_scale, overflow, batch_size)
        else:
            self._pending_collection = True
        histogram_step = self._is_histogram_step(step)
        histograms = []
        if self.weights.wants(step, histogram_step):
            scalars, histograms = self.weights.measure(step, histogram_step)
            self._scalars(list(scalars), step)
        if grads is not None and histogram_step:
            names = self.param_names(len(grads))
            histograms += [(contract.GRAD_HISTOGRAM_PREFIX + name, to_numpy(grad))
                           for name, grad in zip(names, grads, strict=True)]
        self.writer.histograms(histograms, step)
        if stop_now:
            self.should_stop = True
            self.notices.stopping(step, loss_value, grad_norm_value)

    def step_ended(self) -> None:
        """Mark the end of a step's callbacks; the time until `step_begins` is host time."""
        self.clock.step_ended()

    def step_begins(self) -> None:
        """Mark the start of the next step: the time since `step_ended` (data loading, host work
        outside the compiled step) is logged as `train/host_time_ms` (see `timing.StepClock`)."""
        self.clock.step_begins()

    def log_eval(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Evaluation metrics as `eval/<name>` (e.g. {"loss": 0.3, "accuracy": 0.9})."""
        for name, value in metrics.items():
            try:
                self._scalar(contract.EVAL_PREFIX + name, to_float(value), step)
            except Exception as error:  # noqa: BLE001 - a metric that is not a number is skipped
                self.notices.input_error(f"log_eval({name!r})", step, error)

    def note(self, step: int, message: str) -> None:
        """Say once, in the logs (`health/notes`) and on the console, what cannot be logged."""
        self.notices.note(step, message)

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
            self.notices.input_error("log_graph", self._last_step or 0, error)
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
            if self._close_notify is not None:
                self._close_notify()  # sends what the final analysis found (bounded wait)

    def __enter__(self) -> HealthLogger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def param_names(self, count: int) -> list[str]:
        """Names of the watched parameters, or `param_<i>` when `count` does not match them."""
        names = list(self.parameters)
        if len(names) == count:
            return names
        return [f"param_{i}" for i in range(count)]

    # ----- internals

    def _collect(self, step, loss_value, grad_norm_value, param_grad_norms, lr, loss_scale, overflow, batch_size):
        scalars = [(contract.LOSS, loss_value)]
        if grad_norm_value is not None:
            scalars.append((contract.GRAD_NORM, grad_norm_value))
        scalars += [(contract.PARAM_GRAD_NORM_PREFIX + name, to_float(value))
                    for name, value in (param_grad_norms or {}).items()]
        if lr is not None:
            scalars.append((contract.LEARNING_RATE, to_float(lr)))
        if loss_scale is not None:
            scalars.append((contract.LOSS_SCALE, to_float(loss_scale)))
        if overflow is not None:
            scalars.append((contract.OVERFLOW, to_float(overflow)))
            self.window.has_overflow_flag = True
        self._write_window(step, batch_size, scalars)
        if self.online is not None:
            self.online.collection_done()

    def _write_window(self, step: int, batch_size: int | None = None, scalars: list | None = None) -> None:
        """The window's aggregates and the step clock's figures, after `scalars`, in one event."""
        self._pending_collection = False
        scalars = list(scalars or [])
        scalars += self.window.take()
        scalars += self.clock.take(batch_size or self.options.batch_size, self.options.seq_length)
        self._scalars(scalars, step)

    def _scalar(self, tag: str, value: float, step: int) -> None:
        self._scalars([(tag, value)], step)

    def _scalars(self, scalars: list[tuple[str, float]], step: int) -> None:
        wall_time = time.time()
        self.writer.scalars(scalars, step, wall_time)
        if self.online is not None:
            for tag, value in scalars:
                self.online.record_scalar(tag, step, value, wall_time)

    def _is_histogram_step(self, step: int) -> bool:
        freq = self.options.histogram_freq
        return bool(freq) and step % freq == 0 and self.options.logs_histograms(self.rank_info.rank)

    def _grad_stats(self, grads):
        if self._grad_stats_fn is None:
            from trainer_hooks.norms import jitted_grad_norm_stats

            self._grad_stats_fn = jitted_grad_norm_stats()
        return self._grad_stats_fn(*grads)

    def _notifications(self, options: HealthOptions):
        """(send, close) of the notifications `options.notify` asks for, or (None, None). A sink
        without its settings fails here, before training, not at the first finding."""
        if not options.notify and not options.notify_config:
            return None, None
        from tb_health_plugin.notify import ConfigError
        from trainer_hooks.notifications import findings_notifier

        job_dir = os.fspath(options.log_dir)
        run_name = f"{os.path.basename(os.path.normpath(job_dir))}/{self.rank_info.run_folder}"
        try:
            return findings_notifier(
                options.notify, run_name, job_dir, options.collect_freq, options.notify_config,
                self.lang, options.tensorboard_url,
                max(options.findings_min_severity, "warning", key=SEVERITY_RANK.__getitem__),
            )
        except (ConfigError, OSError) as error:
            raise ValueError(f"notify: {error}") from None

    def _on_analysed(self, step: int, status: str) -> None:
        """Say in the log that the online analysis covered the run up to `step`, and its verdict
        (`contract.ONLINE_VERDICT`): a reader may then trust a rank that reported nothing."""
        if status in contract.STATUSES:
            self.writer.scalar(contract.ONLINE_VERDICT, float(contract.STATUSES.index(status)), step)

    def _on_findings(self, findings: list[dict]) -> None:
        if self._notify is not None:
            self._notify(findings)
        if self.notices.findings(findings) and self.options.stop_on_critical:
            self.should_stop = True
