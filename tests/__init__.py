"""Test package.

MindSpore must be imported before protobuf in a process that uses both: importing it switches
protobuf to the pure-python backend its generated modules need, and importing it after the upb
backend is loaded fails inside MindSpore ("Descriptors cannot be created directly"). The suite runs in one process and
collects modules in name order, so MindSpore, when installed, is imported first, here.
"""

try:
    import mindspore  # noqa: F401
except ImportError:
    pass
