"""The benchmark that measures how often the zoo's natural-spike rule labels pure noise."""

from __future__ import annotations

from bench.detection import label_null


def test_narrow_gaussian_noise_gets_no_spike_label_and_wide_noise_gets_many():
    """Rule 6's thresholds are in the loss's units: noise as wide as the zoo's chaotic runs passes
    them by chance (stop 50: about 27 labels per 1,000 steps at a log-noise sd of 2)."""
    assert label_null.labels_per_thousand("gauss", 0.1, 1000, 2) == [0.0, 0.0]
    assert min(label_null.labels_per_thousand("gauss", 2.0, 1000, 2)) > 5.0


def test_the_benchmark_prints_its_table(capsys):
    assert label_null.main(["--steps", "300", "--runs", "1", "--sigmas", "0.1", "1"]) == 0
    out = capsys.readouterr().out
    assert "gauss" in out and "t3" in out and out.count("\n") == 4
