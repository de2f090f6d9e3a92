"""Step time, host time and throughput, averaged per step over each collection window."""

from __future__ import annotations

import time
from collections.abc import Callable

from tb_health_plugin import contract

MS_PER_S = 1000.0


class StepClock:
    """Times the training from the hooks' calls.

    Step time is the wall time between two `log_step` calls divided by the steps they covered.
    Host time is the time from the end of a step's callbacks (`step_ended`) to the start of the
    next step (`step_begins`): data loading and host work outside the compiled step. In
    synchronous data parallelism it is the only per-rank time that differs: every rank's step
    time includes waiting for the slowest.
    """

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now  # seconds; tests drive a clock of their own
        self._last_logged: float | None = None
        self._seconds = 0.0
        self._steps = 0
        self._host_seconds = 0.0
        self._step_ended: float | None = None

    @property
    def running(self) -> bool:
        """Whether a step was logged already: the time from it counts towards the next one."""
        return self._last_logged is not None

    def step_logged(self, steps_done: int) -> None:
        now = self._now()
        if self._last_logged is not None:
            self._seconds += now - self._last_logged
            self._steps += steps_done
        self._last_logged = now

    def step_ended(self) -> None:
        self._step_ended = self._now()

    def step_begins(self) -> None:
        if self._step_ended is not None:
            self._host_seconds += self._now() - self._step_ended
            self._step_ended = None

    def take(self, batch_size: int | None, seq_length: int | None) -> list[tuple[str, float]]:
        """The window's (tag, value) timing scalars (none before two timed calls); then reset."""
        scalars = []
        if self._steps:
            seconds_per_step = self._seconds / self._steps
            scalars.append((contract.STEP_TIME_MS, seconds_per_step * MS_PER_S))
            if batch_size and seconds_per_step > 0:
                scalars.append((contract.THROUGHPUT, batch_size / seconds_per_step))
                if seq_length:
                    scalars.append((contract.TOKENS_PER_S, batch_size * seq_length / seconds_per_step))
            if self._host_seconds:
                scalars.append((contract.HOST_TIME_MS, self._host_seconds / self._steps * MS_PER_S))
        self._seconds, self._steps, self._host_seconds = 0.0, 0, 0.0
        return scalars
