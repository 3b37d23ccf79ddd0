"""The `auto` rule: which method a job runs, from public facts only (d, N~, k, the job's mu), and
the resolution of a caller's algorithm choice."""

from __future__ import annotations

from privclust.clustering.choices import ALGORITHMS, Algorithm
from privclust.clustering.errors import ClusteringInputError

# The method "auto" runs, on every table and budget (bench/RESULTS.md, "auto at every
# dimension"). Above 16 columns pe-lloyd searches in a 16-dimensional projection, then lifts its
# centres with noisy means and refines them with noisy Lloyd steps: there it has a lower loss
# AUC than HDPE-means and than the full-dimensional pe-lloyd of the rule before (which ran it up
# to 32 columns, and above at mu <= 0.4, HDPE-means otherwise), at about HDPE-means' cost.
AUTO_ALGORITHM = Algorithm.PE_LLOYD


def choose_algorithm(n_rows: int, n_cols: int, k: int, mu: float) -> Algorithm:
    """The method "auto" runs for a job on N~ = `n_rows` public rows, d = `n_cols` columns,
    k clusters and a budget of `mu` (the job's whole mu): pe-lloyd, whatever they are.

    The tables behind it are in bench/RESULTS.md. "auto: the rule and the benchmark behind it":
    every method on the Table I sets over epsilon 0.1 to 8 (bench/auto_grid.py), checked on
    held-out make_blobs sets: pe-lloyd has the lowest loss AUC on every set with d <= 16 (tied
    at the KMeans floor on sklearn_4_4) and on the held-out sets at d = 8, 16 and 24. "auto at
    every dimension": above 16 columns pe-lloyd runs PE-means in a projection, lifts its
    centres with noisy means, moves starving centres beside crowded ones and takes a noisy
    Lloyd step; over the Table I epsilons it has a lower loss AUC than both HDPE-means and the
    earlier full-dimensional pe-lloyd on sklearn_4_64 and sklearn_16_64 (10 seeds, and 30
    more) and on held-out sets at d = 96 and 128 with k = 4 to 64 (5 seeds), at every epsilon
    from 0.25 to 4, lower than the full-dimensional pe-lloyd on held-out sets at d = 20, 24
    and 32 (6-20 seeds), and runs in 0.2-0.4 s on 20,000 rows where the full-dimensional
    search took 0.5-4 s. The cells where another method wins (FastLloyd at epsilon 0.1 on
    sklearn_64_16, PE-means at epsilon >= 2 there) are not separated by N~, k or mu from
    cells where the same method loses, so the rule does not read them; N~, d, k and mu stay
    in the signature so that a rule that does can replace this one without touching a caller.
    """
    del n_rows, n_cols, k, mu
    return AUTO_ALGORITHM


def resolve_algorithm(algorithm: str, n_cols: int, *, n_rows: int, k: int, mu: float) -> Algorithm:
    """The concrete algorithm for a choice: "auto" is `choose_algorithm(n_rows, n_cols, k, mu)`
    with the public row count and the job's mu; any other choice is itself."""
    if algorithm not in ALGORITHMS:
        raise ClusteringInputError(
            "algorithm", f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}"
        )
    if algorithm == Algorithm.AUTO:
        return choose_algorithm(n_rows, n_cols, k, mu)
    return Algorithm(algorithm)


def describe_auto() -> str:
    """The rule of `choose_algorithm` as one sentence, rendered from the constants it reads:
    the one description of "auto" that the API's schema, the CLI's help, the estimator's
    docstring and the README and docs/algorithms.md tables carry (a test keeps them equal)."""
    return f"auto runs {AUTO_ALGORITHM.value} on every table and budget"
