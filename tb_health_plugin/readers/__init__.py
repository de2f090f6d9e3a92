"""Read every scalar, histogram and text point of every run under a logdir, incrementally.

Formats: tfevents (TensorBoard, tf.summary, tensorboardX, torch, MindFormers) and MindSpore
summary files. See `logdir_reader.py` for the reading contract and `records.py` for damage
handling.
"""

from tb_health_plugin.readers.logdir_reader import LogdirReader, read_logdir

__all__ = ["LogdirReader", "read_logdir"]
