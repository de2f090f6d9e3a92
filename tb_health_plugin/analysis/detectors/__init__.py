"""Pure detectors over numpy arrays: one statistical method each, documented in its docstring."""
