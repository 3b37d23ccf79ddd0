"""The `auto` rule: which method a job runs, from public facts only (d, N~, k, the job's mu), and
the resolution of a caller's algorithm choice."""

from __future__ import annotations

from privclust.clustering.choices import ALGORITHMS, Algorithm
from privclust.clustering.errors import ClusteringInputError

# Above this many columns "auto" runs HDPE-means unless the budget is small (bench/RESULTS.md,
# "auto: the rule and the benchmark behind it", and "every method in one run").
AUTO_HDPE_ABOVE_DIM = 32
# ... where, up to this job mu, pe-lloyd: about epsilon 1.5 at the Table I sets' delta
# (mu 0.28 at epsilon 1, 0.52 at epsilon 2).
AUTO_PE_LLOYD_MAX_MU_HIGH_DIM = 0.4


def choose_algorithm(n_rows: int, n_cols: int, k: int, mu: float) -> Algorithm:
    """The method "auto" runs for a job on N~ = `n_rows` public rows, d = `n_cols` columns,
    k clusters and a budget of `mu` (the job's whole mu): pe-lloyd when d <= 32; above, pe-lloyd
    when mu <= 0.4 and HDPE-means otherwise.

    The tables behind it are in bench/RESULTS.md. "auto: the rule and the benchmark behind it":
    every method on the Table I sets over epsilon 0.1 to 8 (bench/auto_grid.py), checked on
    held-out make_blobs sets: pe-lloyd has the lowest loss AUC on every set with d <= 16 (tied
    at the KMeans floor on sklearn_4_4) and on the held-out sets at d = 8, 16 and 24. "Every
    method in one run" (10 seeds, bench/table1.py): at d = 64 HDPE-means merges two clusters
    in its projection in some runs at epsilon 0.25 to 1 (sklearn_16_64: mean loss 0.0342 and
    0.0306 at epsilon 0.5 and 1, pe-lloyd 0.0266 and 0.0233), while from epsilon 2 the two tie
    (0.0223 / 0.0224, 0.0221 / 0.0221) and HDPE-means costs 15 times less (0.5 s against 7.4 s
    for 20,000 x 64 at epsilon 4; pe-lloyd's T grows with epsilon). On sklearn_4_64 pe-lloyd
    is at most 2% above HDPE-means at the low epsilons. The cells where another method wins
    (FastLloyd at epsilon 0.1 on sklearn_64_16, PE-means at epsilon >= 2 there) are not
    separated by N~, k or mu from cells where the same method loses, so the rule does not read
    them; N~ and k stay in the signature so that a rule that does can replace this one without
    touching a caller.
    """
    del n_rows, k
    if n_cols <= AUTO_HDPE_ABOVE_DIM or mu <= AUTO_PE_LLOYD_MAX_MU_HIGH_DIM:
        return Algorithm.PE_LLOYD
    return Algorithm.HDPE_MEANS


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
    return (
        f"auto runs {Algorithm.PE_LLOYD.value} on tables of at most {AUTO_HDPE_ABOVE_DIM} "
        f"columns; on wider ones, {Algorithm.PE_LLOYD.value} when the job's mu is at most "
        f"{AUTO_PE_LLOYD_MAX_MU_HIGH_DIM:g} and {Algorithm.HDPE_MEANS.value} above it"
    )
