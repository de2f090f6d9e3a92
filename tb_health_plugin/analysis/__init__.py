"""Analysis: roles, detectors and checks, and the contract report."""
