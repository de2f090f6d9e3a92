"""Checks for the `gradients` signals (see `analysis/engine.py` for the check interface)."""

RUN_CHECKS: list = []
JOB_CHECKS: list = []
