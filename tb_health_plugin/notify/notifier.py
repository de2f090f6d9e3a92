"""Sends alerts from a background thread, so that a slow or broken chat service never touches
the training step or the watch loop that found them.

`submit` only puts alerts on a bounded queue and returns. The worker takes everything queued,
composes messages (one per alert, a summary per
job when many come at once) and sends each to every sink:

* rate-limited per sink to the service's documented limit (`sinks.RATE_LIMITS`); while the
  worker waits, new alerts pile up and go out together as one summary;
* retried with exponential back-off (`BACKOFF_S`, doubling, `MAX_ATTEMPTS` tries, about half a
  minute in all) when the failure may pass (time-outs, HTTP 429/5xx, "send too fast" codes);
* a sink that fails is reported once in the log, with the reason; later failures of it are
  counted, not logged again, and a later success is logged once too.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from tb_health_plugin.notify.alerts import Alert, compose
from tb_health_plugin.notify.sinks import RATE_LIMITS, DeliveryError, Sink, deliver

logger = logging.getLogger("tb_health.notify")

MAX_ATTEMPTS = 5
BACKOFF_S = 1.0  # first wait; 1 + 2 + 4 + 8 = 15 s of waiting over five attempts
QUEUE_LIMIT = 10_000  # batches waiting; beyond it new ones are dropped (and counted)


class RateLimiter:
    """A token bucket: `capacity` messages, refilled at capacity/period per second."""

    def __init__(self, capacity: int, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.rate = float(capacity), capacity / period_s
        self._tokens, self._clock = float(capacity), clock
        self._updated = clock()

    def wait_time(self) -> float:
        """Seconds until a message may go (0 when one may go now)."""
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        self._tokens -= 1.0


class Notifier:
    """Delivers new alerts to `sinks` in the background; see the module docstring."""

    def __init__(self, sinks: list[Sink], lang: str = "en", sleep: Callable[[float], None] = time.sleep) -> None:
        self.sinks, self.lang = list(sinks), lang
        self._queue: queue.Queue[list[Alert] | None] = queue.Queue()
        self._limiters = {id(s): RateLimiter(*RATE_LIMITS[s.kind]) for s in self.sinks}
        self._failing: dict[int, int] = {}  # sink -> failures since it was reported
        self._sleep = sleep
        self._dropped = 0
        self._pending = 0  # batches submitted and not yet handled
        self._done = threading.Condition()
        self.sent = 0  # messages delivered, over all sinks
        self._thread = threading.Thread(target=self._run, name="tb-health-notify", daemon=True)
        self._thread.start()

    def submit(self, alerts: list[Alert]) -> None:
        """Queue alerts (already known to be new) for sending; never blocks, never raises."""
        if not alerts or not self.sinks:
            return
        try:
            if self._queue.qsize() >= QUEUE_LIMIT:
                if not self._dropped:
                    logger.warning("tb-health: notifications queue full (%d batches): new alerts are dropped",
                                   QUEUE_LIMIT)
                self._dropped += len(alerts)
                return
            with self._done:
                self._pending += 1
            self._queue.put_nowait(list(alerts))
        except Exception:  # a full or closed queue must not reach the caller
            pass

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued was sent or given up; True if it finished in time."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued (waiting at most `timeout`), then stop the worker."""
        self.flush(timeout)
        self._queue.put(None)
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            alerts, taken = list(batch), 1
            while True:  # take everything else already queued: one batch, one summary
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                alerts.extend(more)
                taken += 1
            try:
                self._send(alerts)
            except Exception:  # the worker must outlive any bug in composing a message
                logger.exception("tb-health: notification failed")
            with self._done:
                self._pending -= taken
                self._done.notify_all()

    def _send(self, alerts: list[Alert]) -> None:
        for message in compose(alerts, self.lang):
            for sink in self.sinks:
                self._deliver_with_retries(sink, message)

    def _deliver_with_retries(self, sink: Sink, message) -> None:
        limiter = self._limiters[id(sink)]
        wait = BACKOFF_S
        for attempt in range(1, MAX_ATTEMPTS + 1):
            pause = limiter.wait_time()
            if pause > 0:
                self._sleep(pause)
                limiter.wait_time()
            limiter.take()
            try:
                deliver(sink, message, self.lang)
            except DeliveryError as error:
                if error.retriable and attempt < MAX_ATTEMPTS:
                    self._sleep(wait)
                    wait *= 2
                    continue
                self._report_failure(sink, f"{error} (after {attempt} attempt{'s' if attempt > 1 else ''})")
                return
            self.sent += 1
            if self._failing.pop(id(sink), None) is not None:
                logger.warning("tb-health: notifications to %s work again", sink.kind)
            return

    def _report_failure(self, sink: Sink, reason: str) -> None:
        if id(sink) not in self._failing:
            logger.warning("tb-health: cannot send notifications to %s: %s; further failures are not logged",
                           sink.kind, reason)
            self._failing[id(sink)] = 0
        self._failing[id(sink)] += 1
