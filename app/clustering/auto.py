"""The `auto` rule: which method a job runs, from public facts only (d, N~, k, the job's mu)."""

from __future__ import annotations

from app.clustering.result import Algorithm

# Above this many columns "auto" runs HDPE-means (bench/RESULTS.md, "auto: the rule and the
# benchmark behind it"; the earlier "auto threshold" study).
AUTO_HDPE_ABOVE_DIM = 32


def choose_algorithm(n_rows: int, n_cols: int, k: int, mu: float) -> Algorithm:
    """The method "auto" runs for a job on N~ = `n_rows` public rows, d = `n_cols` columns,
    k clusters and a budget of `mu` (the job's whole mu): pe-lloyd when d <= 32, HDPE-means
    above.

    The table behind it is bench/RESULTS.md, "auto: the rule and the benchmark behind it":
    every method on the Table I sets over epsilon 0.1 to 8 (bench/auto_grid.py), checked on
    held-out make_blobs sets. pe-lloyd has the lowest loss AUC over that grid on every set with
    d <= 16 (tied at the KMeans floor on sklearn_4_4) and on the held-out sets at d = 8, 16 and
    24; at d = 64 HDPE-means has the lowest, with pe-lloyd within 1.3% at six times the cost.
    The cells where another method wins (FastLloyd at epsilon 0.1 on sklearn_64_16, PE-means at
    epsilon >= 2 there) are not separated by N~, k or mu from cells where the same method
    loses, so the rule does not read them; they stay in the signature so that a rule that does
    can replace this one without touching a caller.
    """
    del n_rows, k, mu
    return "hdpe-means" if n_cols > AUTO_HDPE_ABOVE_DIM else "pe-lloyd"
