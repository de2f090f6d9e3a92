"""Read every scalar, histogram and text point of every run under a logdir, incrementally.

Formats: tfevents (TensorBoard, tf.summary, tensorboardX, torch, MindFormers) and MindSpore
summary files. See `logdir_reader.py` for the reading contract and `records.py` for damage
handling.
"""


__all__ = ["LogdirReader", "read_logdir"]


def __getattr__(name: str):
    """`LogdirReader` and `read_logdir` on first use: the readers import protobuf and TensorBoard,
    which `readers.storage` or `readers.discovery` alone (the CLI's `--help`) should not pay for."""
    if name in __all__:
        from tb_health_plugin.readers import logdir_reader

        return getattr(logdir_reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
