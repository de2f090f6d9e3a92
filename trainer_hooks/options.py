"""The hooks' options: one frozen dataclass, validated in one place, documented once.

`HealthLogger`, `HealthMonitor` and the MindFormers callback all take these fields as keyword
arguments (`HealthMonitor(log_dir, collect_freq=10, ...)`) or as `options=HealthOptions(...)`.
A bad value fails at construction with a message saying what to change, never mid-training.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from tb_health_plugin.contract import SEVERITY_RANK

NOTIFY_SINKS = ("webhook", "dingtalk", "feishu", "wecom", "slack", "email")  # tb_health_plugin.notify's


@dataclass(frozen=True)
class HealthOptions:
    """What the hooks log, how often, and what they do about findings.

    Attributes:
        log_dir: root folder of the logs; each rank writes into `rank_<id>/` below it (point
            TensorBoard or `tb-health check` at the root).
        collect_freq: write scalars at the first step (step 1, or the first after a resume: the
            run's starting point) and every this many steps. Every step's loss, gradient norm
            and overflow flag still feed the window aggregates (`train/loss_max`,
            `train/loss_min`, `train/grad_norm_max`, `train/nonfinite_count`,
            `train/overflow_count`), so no spike is lost.
        lean_steps: no longer has an effect (kept so that existing configurations load; a
            `DeprecationWarning` says so): `TrainOneStepWithHealth` now computes every gradient
            norm in one graph at every step, for less than its lean second graph cost.
        weight_freq: every this many steps log `weight_norm/<param>` and `update_ratio/<param>`
            (copies the weights to the host at that step and the one before). 0 turns it off.
        histogram_freq: every this many steps log `weight/<param>` (and `grad/<param>` when
            gradients are passed) histograms. 0 turns it off.
        histogram_ranks: ranks that log histograms (`None`: all). Default: rank 0 only.
        batch_size: samples per step, for `train/throughput` (samples/s); `HealthMonitor`
            defaults it to the dataset's batch size.
        seq_length: tokens per sample; when given, `train/tokens_per_s` is logged too.
        online_analysis: run the project's detectors every `analyze_every` collections in a
            background thread and write new findings as `health/findings` text, printed as
            well. It keeps at most `trainer_hooks.online.MAX_POINTS_PER_TAG` points per tag.
        analyze_every: collections between two online analyses.
        stop_on_critical: when a critical finding appears, stop training (`should_stop`; the
            MindSpore callbacks call `run_context.request_stop()`). A non-finite loss, or a
            non-finite gradient norm on a step the loss scaler did not flag as an overflow (so
            its update was applied), stops at that very step, logged in full (with
            `TrainOneStepWithHealth`, its per-parameter gradient norms included: the step
            computes them at every step).
        findings_min_severity: the least severity written and printed ("info", "warning",
            "critical").
        rank, world_size: override the detected rank (see `trainer_hooks.ranks`).
        flush_secs: how often the writer thread flushes to disk (an interrupted run keeps what
            was flushed).
        analyze: the analysis function (RunData -> run report); default: the project's engine.
            For tests and experiments.
        log_graph: (`HealthMonitor`) write the network's graph once, at the first step, for
            TensorBoard's Graphs tab: in graph mode the training cell's compiled graph (no
            compilation); in PyNative the cell it wraps (network + loss) is compiled once for it
            (see `trainer_hooks.graph`).
        notify: send new findings (at `findings_min_severity` or worse, warnings at least) to
            these sinks while training: "webhook", "dingtalk", "feishu", "wecom", "slack",
            "email"; their URLs and secrets come from the environment (`TB_HEALTH_<SINK>_URL`,
            `TB_HEALTH_<SINK>_SECRET`, `TB_HEALTH_SMTP_*`) or `notify_config`, never from here.
            One rank speaks for the job (`trainer_hooks.notifications`).
        notify_config: a TOML file with one table per sink (`url`, `secret`).
        lang: the language of the findings the hooks print, write and send, "en" or "zh"
            (default: from the locale, LC_ALL / LC_MESSAGES / LANG).
        tensorboard_url: TensorBoard's address, for a link to the run in each message.
    """

    log_dir: str | os.PathLike
    collect_freq: int = 10
    _: KW_ONLY
    lean_steps: bool | None = None
    weight_freq: int = 50
    histogram_freq: int = 100
    histogram_ranks: Sequence[int] | None = (0,)
    batch_size: int | None = None
    seq_length: int | None = None
    online_analysis: bool = True
    analyze_every: int = 10
    stop_on_critical: bool = False
    findings_min_severity: str = "warning"
    rank: int | None = None
    world_size: int | None = None
    flush_secs: float = 10.0
    analyze: Callable[[Any], dict] | None = None
    log_graph: bool = False
    notify: Sequence[str] = ()
    notify_config: str | None = None
    lang: str | None = None
    tensorboard_url: str | None = None

    def __post_init__(self) -> None:
        if self.lean_steps is not None:
            warnings.warn(
                "tb-health: lean_steps no longer has an effect (every gradient norm is now computed in one "
                "graph at every step); remove it from the options",
                DeprecationWarning,
                stacklevel=3,
            )
        if not isinstance(self.log_dir, (str, os.PathLike)) or not os.fspath(self.log_dir):
            raise ValueError(f"log_dir must be a folder path (str or Path), got {self.log_dir!r}")
        _positive_int("collect_freq", self.collect_freq)
        _positive_int("weight_freq", self.weight_freq, allow_zero=True)
        _positive_int("histogram_freq", self.histogram_freq, allow_zero=True)
        _positive_int("analyze_every", self.analyze_every)
        for name in ("batch_size", "seq_length"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if self.findings_min_severity not in SEVERITY_RANK:
            raise ValueError(
                f"findings_min_severity must be one of {list(SEVERITY_RANK)}, got {self.findings_min_severity!r}"
            )
        flush_secs = self.flush_secs
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, (int, float)) or flush_secs <= 0:
            raise ValueError(f"flush_secs must be a positive number of seconds, got {flush_secs!r}")
        if isinstance(self.notify, str):
            object.__setattr__(self, "notify", (self.notify,))
        object.__setattr__(self, "notify", tuple(self.notify))
        unknown = [sink for sink in self.notify if sink not in NOTIFY_SINKS]
        if unknown:
            raise ValueError(f"notify: unknown sink {unknown[0]!r}; sinks: {', '.join(NOTIFY_SINKS)}")
        if self.lang not in (None, "en", "zh"):
            raise ValueError(f"lang must be 'en' or 'zh', got {self.lang!r}")
        if self.histogram_ranks is not None:
            object.__setattr__(self, "histogram_ranks", tuple(int(r) for r in self.histogram_ranks))
        for name in ("rank", "world_size"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def logs_histograms(self, rank: int) -> bool:
        return self.histogram_ranks is None or rank in self.histogram_ranks


def _positive_int(name: str, value: Any, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        hint = "a positive integer" + (" (or 0 to turn it off)" if allow_zero else "")
        raise ValueError(f"{name} must be {hint}, got {value!r}")
