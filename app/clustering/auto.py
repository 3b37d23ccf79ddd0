"""The `auto` rule: which method a job runs, from public facts only (d, N~, k, the job's mu)."""

from __future__ import annotations

from app.clustering.result import Algorithm

# "auto" picks HDPE-means when d exceeds this (measured in bench/RESULTS.md, "auto threshold").
AUTO_HDPE_ABOVE_DIM = 32


def choose_algorithm(n_rows: int, n_cols: int, k: int, mu: float) -> Algorithm:
    """The method "auto" runs for a job on N~ = `n_rows` public rows, d = `n_cols`, k clusters
    and a budget of `mu` (the job's whole mu)."""
    del n_rows, k, mu
    return "hdpe-means" if n_cols > AUTO_HDPE_ABOVE_DIM else "pe-means"
