"""Adapters from RunSignals to the pure detectors; each module exposes RUN_CHECKS and JOB_CHECKS."""
