"""PE-means (docs/algorithms.md section 4): private evolution of candidate centres by T noisy
vote histograms (privclust.clustering.evolution.evolution)."""

from __future__ import annotations

from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.evolution.vote_cells import VOTE_DTYPE
from privclust.clustering.mechanisms.search import search
from privclust.clustering.run.method import Method, RunStart
from privclust.clustering.run.options import (
    EvolutionKeywords,
    Options,
    options_for,
)
from privclust.clustering.run.plan import (
    PlanBasis,
    Releases,
    default_pe_iterations,
    planned_iterations,
    vote_histograms,
)
from privclust.clustering.run.result import ClusteringResult, Outcome
from privclust.clustering.run.runner import run_method


def plan(basis: PlanBasis, options: Options) -> Releases:
    """T vote histograms: T = floor(4 sqrt(d)), times epsilon when epsilon > 1."""
    iterations = planned_iterations(
        options, lambda: default_pe_iterations(basis.n_cols, basis.epsilon)
    )
    return Releases(
        iterations=iterations,
        parts=(vote_histograms(basis, iterations),),
        progress_total=iterations,
    )


def run(start: RunStart, options: Options) -> Outcome:
    """The PE-means loop on the clipped rows."""
    return search(start.points, start, options)


METHOD = Method(
    name=Algorithm.PE_MEANS,
    plan=plan,
    run=run,
    rows_dtype=VOTE_DTYPE,  # the rows are only ever voted with
    evolves=True,
)


def pe_means(X: np.ndarray, k: int, **keywords: Unpack[EvolutionKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of X by PE-means; mu-GDP for the requested mu.

    X is N x d (any real dtype; a read-only memmap is fine); rows are clipped into the ball of
    `radius` around `center` (the origin when None), which the data owner declares. Privacy is
    (epsilon, delta) or mu, exactly one, under add/remove neighbours by default. `n_public` is
    the dataset's released noisy row count N~; without it the run releases its own from a tenth
    of mu (see `runner.plan_for_rows`). With `relation="replace-one"` N is public and every
    release is calibrated to replace-one sensitivities. T defaults to floor(4 sqrt(d)), times
    epsilon when epsilon > 1 (no scaling when only mu is given); L to max(N~/(5k), 4) capped so
    the population stays within `max_population`. `progress(t, T)` is called after each
    iteration and anything it raises propagates. `rng` is for tests only: by default every
    random number comes from a ChaCha20 generator keyed from OS entropy.
    """
    return run_method(METHOD, X, k, options_for(EvolutionKeywords, keywords))
