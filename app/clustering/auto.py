"""The `auto` rule: which method a job runs, from public facts only (d, N~, k, the job's mu)."""

from __future__ import annotations

from app.clustering.result import Algorithm

# Above this many columns "auto" runs HDPE-means (bench/RESULTS.md, "auto threshold" and
# "auto: the rule and the benchmark behind it").
AUTO_HDPE_ABOVE_DIM = 32


def choose_algorithm(n_rows: int, n_cols: int, k: int, mu: float) -> Algorithm:
    """The method "auto" runs for a job on N~ = `n_rows` public rows, d = `n_cols` columns,
    k clusters and a budget of `mu` (the job's whole mu): pe-lloyd when d <= 32, HDPE-means
    above.

    Derived from bench/RESULTS.md, "auto: the rule and the benchmark behind it": every method
    on the Table I sets over epsilon 0.1 to 8 (bench/auto_grid.py). pe-lloyd has the lowest
    AUC, or is within 3% of it, on every set with d <= 16 and at nearly every epsilon there;
    FastLloyd and the LSH coreset win only single noisy cells (iris, epsilon 0.1) that no
    public fact separated from cells where they lose. At d = 64 HDPE-means (with its final
    sums given half the budget) is within 3% of pe-lloyd at a sixth of its cost. N~, k and mu
    did not change the choice on these sets, so the rule does not read them; they are part of
    the signature so that a rule that does can replace this one without touching a caller.
    """
    del n_rows, k, mu
    return "hdpe-means" if n_cols > AUTO_HDPE_ABOVE_DIM else "pe-lloyd"
