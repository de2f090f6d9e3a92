"""Adapters from RunSignals to the pure detectors, returning `Event`s; the kinds that use them are
registered in `analysis/kinds/`."""
