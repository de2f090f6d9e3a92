"""`HealthMonitor`: the MindSpore callback for `Model.train(..., callbacks=[HealthMonitor(log_dir)])`.

It reads what the training cell returns each step. On a plain `Model(net, loss_fn, optimizer)`
that is the loss alone (the learning rate comes from the optimizer's schedule, the weights from
the parameters); with `TrainOneStepWithHealth` it is also the global and per-parameter gradient
norms, the learning rate used and, with loss scaling, the loss scale and overflow flag.
Nothing it does may break the training: any error is warned about once and the monitor goes
quiet.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
from mindspore.train.callback import Callback

from trainer_hooks.health_logger import HealthLogger
from trainer_hooks.lr import lr_of_step
from trainer_hooks.options import HealthOptions
from trainer_hooks.train_cell import (
    HEALTH_GRAD_STATS,
    HEALTH_LOSS,
    HEALTH_LOSS_SCALE,
    HEALTH_LR,
    HEALTH_OVERFLOW,
    HEALTH_WINDOW,
    WINDOW_FIELDS,
    TrainOneStepWithHealth,
)
from trainer_hooks.values import named_parameters, to_numpy

logger = logging.getLogger("trainer_hooks")

SINK_NOTE = (
    "dataset_sink_mode=True: callbacks see one step per sink of {n} steps, so the loss, gradient "
    "norms and learning rate are those of the last step of each sink, step time is the sink's "
    "mean and update ratios are not logged; {window}. Train with dataset_sink_mode=False (or "
    "sink_size=1) for per-step health."
)
SINK_WINDOW_KEPT = "the window aggregates (max/min loss, max gradient norm, non-finite and overflow counts) still cover every step, computed in TrainOneStepWithHealth"
SINK_WINDOW_LOST = (
    "the window aggregates cover only those last steps (wrap the cell with TrainOneStepWithHealth, "
    "its graph compiled after the monitor's on_train_begin, to cover every step)"
)
GRAPH_COMPILED_NOTE = (
    "log_graph in PyNative: the network and loss were compiled once in graph mode for their graph "
    "({seconds:.1f} s, not run)."
)
GRAPH_NO_INPUTS_NOTE = "log_graph: no graph logged (PyNative without the step's inputs to compile the network for)."
PLAIN_MODEL_NOTE = (
    "gradient norms are not visible to a callback on a plain Model: wrap the training cell, "
    "Model(TrainOneStepWithHealth(nn.WithLossCell(net, loss_fn), optimizer)), to log them."
)


def never_raises(hook):
    """Run a callback hook; on any error warn once and turn the monitor off."""

    @functools.wraps(hook)
    def guarded(self, *args, **kwargs):
        if self._broken:
            return None
        try:
            return hook(self, *args, **kwargs)
        except Exception as error:
            self._broken = True
            message = f"tb-health: HealthMonitor stopped logging after an error in {hook.__name__}: {type(error).__name__}: {error}"
            logger.warning(message, exc_info=True)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            self._close_quietly()
            return None

    return guarded


class HealthMonitor(Callback):
    """Logs training-health signals of `Model.train` as TensorBoard event files.

    Each rank writes `<log_dir>/rank_<id>/`. With only `log_dir` it works on any `Model`; wrap the
    training cell with `TrainOneStepWithHealth` to add gradient norms (see the module docstring).
    Takes the fields of `trainer_hooks.options.HealthOptions` (`HealthMonitor(log_dir,
    collect_freq=10, stop_on_critical=True, ...)`) or `options=HealthOptions(...)`, validated
    here so that a bad value fails now, with a message, not mid-training. `batch_size` defaults
    to the dataset's.
    """

    def __init__(self, *args: Any, options: HealthOptions | None = None, **fields: Any) -> None:
        super().__init__()
        if options is None:
            options = HealthOptions(*args, **fields)
        elif args or fields:
            raise TypeError("give either options=HealthOptions(...) or its fields, not both")
        self.options = options
        self.health: HealthLogger | None = None
        self._broken = False
        self._last_step = 0
        self._health_cell: TrainOneStepWithHealth | None = None
        self._optimizer = None
        self._graph_pending = options.log_graph

    # ----- MindSpore callback hooks

    @never_raises
    def on_train_begin(self, run_context) -> None:
        cb_params = run_context.original_args()
        self._optimizer = field(cb_params, "optimizer") or getattr(cb_params.train_network, "optimizer", None)
        self._health_cell = find_cell(cb_params.train_network, TrainOneStepWithHealth)
        parameters = self._optimizer.parameters if self._optimizer is not None else cb_params.train_network.trainable_params()
        options = self.options
        if options.batch_size is None:
            options = replace(options, batch_size=dataset_batch_size(cb_params))
        self.health = HealthLogger(options=options, parameters=named_parameters(parameters))
        self._last_step = int(field(cb_params, "cur_step_num") or 0)
        if self._health_cell is not None:
            # every step reaches this callback unless sinking: aggregate on the host then
            sinking = bool(field(cb_params, "dataset_sink_mode"))
            self._health_cell.device_window = sinking
            self._health_cell.reset_window()
        self._on_begin(cb_params)

    @never_raises
    def on_train_step_begin(self, run_context) -> None:
        if self.health is None:
            return
        self.health.step_begins()

    @never_raises
    def on_train_step_end(self, run_context) -> None:
        cb_params = run_context.original_args()
        if self.health is None:
            return
        step = int(cb_params.cur_step_num)
        steps_done = max(step - self._last_step, 1)
        self._last_step = step
        if self._graph_pending:  # before log_step: its clock then starts after this one-off work
            self._graph_pending = False
            self._log_network_graph(cb_params, step)
        try:
            values = self.step_values(cb_params, step, steps_done)
        except Exception as error:  # noqa: BLE001 - an unreadable output skips this step only
            self.health.notices.input_error("log_step", step, error)
            self.health.step_ended()
            return
        if field(cb_params, "dataset_sink_mode") and steps_done > 1:
            window = SINK_WINDOW_KEPT if "window" in values else SINK_WINDOW_LOST
            self.health.note(step, SINK_NOTE.format(n=steps_done, window=window))
        self.health.log_step(step, steps_done=steps_done, **values)
        if self.health.should_stop:
            logger.error("tb-health: stopping training on a critical finding (stop_on_critical=True)")
            run_context.request_stop()
        self.health.step_ended()  # last: our own logging is not the rank's host time

    @never_raises
    def on_eval_end(self, run_context) -> None:
        cb_params = run_context.original_args()
        results = field(cb_params, "eval_results")
        if self.health is not None and isinstance(results, dict):
            # Model.fit reports {"<metric>": ..., "eval_loss": ...}: log eval/<metric>, eval/loss
            metrics = {name.removeprefix("eval_"): value for name, value in results.items()}
            self.health.log_eval(self._last_step, metrics)

    @never_raises
    def on_train_epoch_end(self, run_context) -> None:
        if self.health is not None:
            self.health.flush()

    def on_train_end(self, run_context) -> None:
        self._close_quietly()

    def __exit__(self, *exc_info) -> None:
        # Model.train enters every callback as a context manager: this runs on interrupts too.
        self._close_quietly()

    # ----- reading a step

    def step_values(self, cb_params, step: int, steps_done: int = 1) -> dict[str, Any]:
        """The `HealthLogger.log_step` arguments visible in this step's `cb_params`."""
        outputs = cb_params.net_outputs
        if self._health_cell is not None and isinstance(outputs, (tuple, list)) and len(outputs) == 2:
            health = to_numpy(outputs[1]).astype(np.float64).reshape(-1)  # the one host sync of the step
            values = {"loss": health[HEALTH_LOSS], "lr": health[HEALTH_LR], "grad_stats": health[HEALTH_GRAD_STATS:]}
            if self._health_cell.loss_scaling:
                values["loss_scale"] = health[HEALTH_LOSS_SCALE]
                values["overflow"] = health[HEALTH_OVERFLOW]
            if steps_done > 1 and health[HEALTH_WINDOW] >= 0:
                # a sink of several steps: the cell's aggregates cover all of them
                values["window"] = cell_window(health)
                self._health_cell.reset_window()
            return values
        if isinstance(outputs, (tuple, list)) and len(outputs) == 3:
            # nn.TrainOneStepWithLossScaleCell: (loss, overflow, loss scale)
            values = {"loss": outputs[0], "overflow": outputs[1], "loss_scale": outputs[2]}
        else:
            values = {"loss": outputs[0] if isinstance(outputs, (tuple, list)) else outputs}
        self.health.note(step, PLAIN_MODEL_NOTE)
        if self.health.is_collect_step(step) and self._optimizer is not None:
            values["lr"] = lr_of_step(self._optimizer, step)
        return values

    def _log_network_graph(self, cb_params, step: int) -> None:
        """The training cell's compiled graph (graph mode), else the wrapped cell compiled for
        this step's inputs (PyNative). A failure costs the graph only, with a note."""
        from trainer_hooks.graph import compile_graph, compiled_graph, wrapped_cell

        try:
            graph = compiled_graph(cb_params.train_network)
            if graph is None:
                inputs = field(cb_params, "train_dataset_element")
                if inputs is None:
                    self.health.note(step, GRAPH_NO_INPUTS_NOTE)
                    return
                started = time.perf_counter()
                graph = compile_graph(wrapped_cell(cb_params.train_network), *inputs)
                self.health.note(step, GRAPH_COMPILED_NOTE.format(seconds=time.perf_counter() - started))
            if graph is not None:
                self.health.log_graph(graph)
        except Exception as error:  # noqa: BLE001 - the graph is an extra: monitoring goes on
            message = f"tb-health: the network graph was not logged: {type(error).__name__}: {error}"
            logger.warning(message)
            self.health.note(step, message.removeprefix("tb-health: "))

    def _on_begin(self, cb_params) -> None:
        """Extension point for subclasses (the MindFormers monitor)."""

    def _close_quietly(self) -> None:
        health, self.health = self.health, None
        if health is not None:
            try:
                health.close()
            except Exception as error:
                logger.warning("tb-health: closing the health logs failed: %s", error)


def cell_window(health: np.ndarray) -> dict[str, float]:
    """The window aggregates in a health vector; the empty markers (-inf max, +inf min) as NaN."""
    window = dict(zip(WINDOW_FIELDS, health[HEALTH_WINDOW:HEALTH_GRAD_STATS].tolist(), strict=True))
    for name, empty in (("loss_max", -np.inf), ("loss_min", np.inf), ("grad_norm_max", -np.inf)):
        if window[name] == empty:
            window[name] = float("nan")
    return window


def field(cb_params, name: str) -> Any:
    """A `cb_params` field or None (MindSpore's params raise KeyError for missing fields)."""
    try:
        return getattr(cb_params, name)
    except (AttributeError, KeyError):
        return None


def find_cell(cell, cell_type):
    """The first cell of `cell_type` in `cell` or its sub-cells (wrappers may surround it)."""
    if isinstance(cell, cell_type):
        return cell
    if cell is None or not hasattr(cell, "cells_and_names"):
        return None
    for _, sub_cell in cell.cells_and_names():
        if isinstance(sub_cell, cell_type):
            return sub_cell
    return None


def dataset_batch_size(cb_params) -> int | None:
    dataset = field(cb_params, "train_dataset")
    try:
        size = int(dataset.get_batch_size()) if dataset is not None else None
    except Exception:
        return None
    return size if size and size > 0 else None

