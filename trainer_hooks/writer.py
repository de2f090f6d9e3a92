"""Event-file writing that can never break the training it records.

Everything goes through TensorBoard's own `EventFileWriter` (a background thread does the file
I/O). Scalars and histograms, written at every collection step, are serialized by `event_bytes`
(the bytes TensorBoard's protos give, without protobuf's pure-Python backend, which MindSpore
imposes and which took 30x longer); texts and graphs by TensorBoard's protos. Any failure
(unwritable folder, full disk, a dead writer thread) is warned about once; later writes are
dropped silently so training carries on. TensorBoard's writer thread re-raises its I/O error
after storing it for the next write to raise; Python would print that as an "Exception in
thread" traceback next to our warning, so a `threading.excepthook` (chained to the one before
it) keeps quiet for our writer threads only.

TensorBoard's `RecordWriter` computes each record's masked CRC32C with its TensorFlow stub's
pure-Python loop (about 0.35 us a byte here), on its writer thread and holding the interpreter
lock, so it delayed the training thread by as much CPU as building the events did: the writer's
record writer gets the same framing with `google_crc32c` (`CrcRecordWriter`, same bytes).

TensorBoard (hence protobuf) is imported only when a writer is created: MindSpore must be
imported before protobuf in a process (it needs protobuf's pure-python backend), so importing
`trainer_hooks` before `mindspore` must not load protobuf.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import warnings
import weakref
from collections.abc import Sequence

import numpy as np

from trainer_hooks.event_bytes import histogram_value, histograms_event, scalars_event
from trainer_hooks.values import square_sum

logger = logging.getLogger(__name__)

HISTOGRAM_BUCKETS = 30
# Events queued for the writer thread before `add_event` blocks the caller; generous so that a
# slow disk delays only the file, not the training step.
MAX_QUEUED_EVENTS = 4096


_writer_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_previous_excepthook = None
_hook_lock = threading.Lock()
_constructing = 0  # writers being created: their thread may fail before it is registered


def _quiet_for_writer_threads(args: threading.ExceptHookArgs) -> None:
    ours = args.thread in _writer_threads or (
        _constructing and type(args.thread).__name__ == "_AsyncWriterThread"
    )
    if ours and isinstance(args.exc_value, Exception):
        return  # stored by TensorBoard's thread; SafeEventWriter warns when the next write raises it
    _previous_excepthook(args)


def _install_excepthook() -> None:
    global _previous_excepthook, _constructing
    with _hook_lock:
        if _previous_excepthook is None:
            _previous_excepthook = threading.excepthook
            threading.excepthook = _quiet_for_writer_threads
        _constructing += 1


def _watch_writer_thread(writer) -> None:
    """Register TensorBoard's writer thread (a private attribute: left alone if it moves)."""
    global _constructing
    thread = getattr(getattr(writer, "_async_writer", None), "_worker", None)
    with _hook_lock:
        _constructing -= 1
        if isinstance(thread, threading.Thread):
            _writer_threads.add(thread)


@functools.cache
def crc_record_writer_class():
    """`RecordWriter` framing records as TensorBoard's does, with the C CRC32C
    (`tb_health_plugin.tfrecord.frame`); built on first use (TensorBoard is imported late)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    from tb_health_plugin.tfrecord import frame

    class CrcRecordWriter(RecordWriter):
        def write(self, data):
            self._writer.write(frame(data))

    return CrcRecordWriter


def _use_c_crc(writer) -> None:
    """Give TensorBoard's writer the C CRC (module docstring). Its record writer is a private
    attribute: if it moves, the writer keeps TensorBoard's own, slower but correct."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    record_writer = getattr(getattr(writer, "_async_writer", None), "_writer", None)
    if type(record_writer) is RecordWriter and hasattr(record_writer, "_writer"):
        record_writer.__class__ = crc_record_writer_class()


def histogram_values(values) -> np.ndarray:
    """The finite values as a flat float array: float32 weights stay float32 (numpy bins them
    twice as fast as a float64 copy; the sums are taken in float64), other types become float64."""
    flat = np.ravel(values)
    if flat.dtype not in (np.float32, np.float64):
        flat = flat.astype(np.float64)
    finite = np.isfinite(flat)
    return flat if finite.all() else flat[finite]


def _wall_time(wall_time: float | None) -> float:
    """The event's time: the one given, else now."""
    return time.time() if wall_time is None else wall_time


class SafeEventWriter:
    """Scalars, histograms and texts into one tfevents file of `log_dir`, failures tolerated."""

    def __init__(self, log_dir: str, flush_secs: float = 10.0) -> None:
        self.log_dir = log_dir
        self._lock = threading.Lock()
        self._failed = False
        self._writer = None
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            _install_excepthook()
            writer = None
            try:
                writer = self._writer = EventFileWriter(log_dir, max_queue_size=MAX_QUEUED_EVENTS, flush_secs=flush_secs)
            finally:
                _watch_writer_thread(writer)
            _use_c_crc(writer)
        except Exception as error:  # unwritable folder: warn, keep training
            self._fail(error)

    @property
    def healthy(self) -> bool:
        return self._writer is not None and not self._failed

    def scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        self.scalars([(tag, value)], step, wall_time)

    def scalars(self, values: Sequence[tuple[str, float]], step: int, wall_time: float | None = None) -> None:
        """Several scalars of one step as one event, a `Summary` with a value per tag (as
        TensorFlow's merged summaries and tensorboardX's `add_scalars` write): every reader
        takes it as one event per tag. Its bytes are built by `event_bytes` (protobuf's
        pure-Python backend, which MindSpore imposes, took 30x longer)."""
        if not values or not self.healthy:
            return
        self._write_serialized(scalars_event(values, step, _wall_time(wall_time)))

    def histograms(self, items: Sequence[tuple[str, np.ndarray]], step: int, wall_time: float | None = None) -> None:
        """Legacy `HistogramProto`s of the finite values (what TensorBoard's Histograms tab
        reads), one step's tags in one event, its bytes built by `event_bytes`."""
        if not items or not self.healthy:
            return
        values = []
        for tag, array in items:
            finite = histogram_values(array)
            if finite.size == 0:
                continue
            low, high = float(finite.min()), float(finite.max())
            counts, edges = np.histogram(finite, bins=HISTOGRAM_BUCKETS, range=(low, high))
            values.append(histogram_value(tag, low, high, float(finite.size), float(finite.sum(dtype=np.float64)),
                                          square_sum(finite), edges[1:], counts))
        if values:
            self._write_serialized(histograms_event(values, step, _wall_time(wall_time)))

    def text(self, tag: str, text: str, step: int, wall_time: float | None = None) -> None:
        """A text summary in the format of TensorBoard's Text plugin."""
        if not self.healthy:
            return
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.text import metadata as text_metadata

        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode("utf-8")], tensor_shape=TensorShapeProto())
        event = self._event(step, wall_time)
        event.summary.value.add(
            tag=tag, metadata=text_metadata.create_summary_metadata(display_name=None, description=None), tensor=tensor
        )
        self._write(event)

    def graph(self, graph_def) -> None:
        """A TensorBoard `GraphDef` as the run's graph (`Event.graph_def`, the Graphs tab)."""
        if not self.healthy:
            return
        from tensorboard.compat.proto import event_pb2

        self._write(event_pb2.Event(wall_time=time.time(), graph_def=graph_def.SerializeToString()))

    def flush(self) -> None:
        if self.healthy:
            try:
                self._writer.flush()
            except Exception as error:
                self._fail(error)

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as error:
                if not self._failed:
                    self._fail(error)

    @staticmethod
    def _event(step: int, wall_time: float | None):
        from tensorboard.compat.proto import event_pb2

        return event_pb2.Event(wall_time=_wall_time(wall_time), step=int(step))

    def _write(self, event) -> None:
        try:
            with self._lock:
                self._writer.add_event(event)
        except Exception as error:
            self._fail(error)

    def _write_serialized(self, data: bytes) -> None:
        """An event already serialized, handed to the writer's queue as `add_event` hands the
        bytes of the event it serializes. That queue is a private attribute: if it moves, the
        bytes are parsed back into an `Event` (slower, the same file)."""
        write = getattr(getattr(self._writer, "_async_writer", None), "write", None)
        if write is None:
            from tensorboard.compat.proto import event_pb2

            self._write(event_pb2.Event.FromString(data))
            return
        try:
            with self._lock:
                write(data)
        except Exception as error:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._failed:
                return
            self._failed = True
        message = (
            f"tb-health: cannot write health logs to {self.log_dir!r} ({type(error).__name__}: {error}); "
            "training continues without them."
        )
        logger.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
