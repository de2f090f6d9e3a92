"""tb-health: training-health analysis for TensorBoard and MindSpore logs.

Readers (`readers/`) load every logged point, the analysis (`analysis/`) turns series into
findings, `plugin.py` serves the Health tab and `cli.py` the `tb-health` command.
"""

__version__ = "0.1.0"
