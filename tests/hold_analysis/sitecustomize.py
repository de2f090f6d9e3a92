"""Holds every analysis of a test's TensorBoard worker while a file exists.

Python imports `sitecustomize` from the path at start, so a test that puts this folder on the
PYTHONPATH of its `tensorboard` (the worker process inherits it) and names a file in
`TB_HEALTH_TEST_HOLD_ANALYSIS` gets a worker whose analyses wait before they start for as long as
that file exists. "While a long analysis runs" then lasts as long as the test needs, whatever the
machine's load and however fast the analysis has become; nothing else changes.
"""

import os

HOLD_FILE = os.environ.get("TB_HEALTH_TEST_HOLD_ANALYSIS")

if HOLD_FILE:
    import time

    from tb_health_plugin.analysis import triage

    _analyze_unit = triage.analyze_unit

    def _held_analyze_unit(*args, **kwargs):
        while os.path.exists(HOLD_FILE):
            time.sleep(0.02)
        return _analyze_unit(*args, **kwargs)

    triage.analyze_unit = _held_analyze_unit
