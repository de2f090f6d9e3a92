"""The benchmark that measures how often the zoo's natural-spike rule labels pure noise."""

from __future__ import annotations

from bench.detection import label_null


def test_gaussian_noise_of_any_width_gets_next_to_no_spike_label():
    """Rule 6's other thresholds are in the loss's units, which noise as wide as the zoo's chaotic
    runs passed by chance (stop 50: about 27 labels per 1,000 steps at a log-noise sd of 2); its
    noise test asks a jump to stand 4.26 robust sds out of the run's own noise."""
    assert label_null.labels_per_thousand("gauss", 0.1, 1000, 2) == [0.0, 0.0]
    assert max(label_null.labels_per_thousand("gauss", 2.0, 2000, 2)) <= 1.0
    assert min(label_null.labels_per_thousand("t3", 0.5, 2000, 2)) > 1.0  # heavier tails still pass: said so


def test_the_benchmark_prints_its_table(capsys):
    assert label_null.main(["--steps", "300", "--runs", "1", "--sigmas", "0.1", "1"]) == 0
    out = capsys.readouterr().out
    assert "gauss" in out and "t3" in out and out.count("\n") == 4
