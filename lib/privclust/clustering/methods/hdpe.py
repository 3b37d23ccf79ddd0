"""HDPE-means (docs/algorithms.md section 5): PE-means on a random projection, then noisy means
of the clusters it labels."""

from __future__ import annotations

from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import check_integer
from privclust.clustering.mechanisms.projection import (
    default_projected_iterations,
    evolve_in_projection,
    planned_projection_dim,
    projected_parts,
)
from privclust.clustering.run.method import Method, RunStart
from privclust.clustering.run.options import EvolutionKeywords, Options, options_for
from privclust.clustering.run.plan import PlanBasis, Releases, planned_iterations
from privclust.clustering.run.result import ClusteringResult, Outcome
from privclust.clustering.run.runner import run_method
from privclust.clustering.run.schedule import NOISY_SUMS

# HDPE-means's final noisy sums are priced, by default, as many releases as its PE iterations:
# half of the releases' mu^2 goes to the d-dimensional sums, whose noise otherwise dominates
# the loss (bench/RESULTS.md, "HDPE-means: the loss"). The published split is 1.
MAX_HDPE_SUM_WEIGHT = 10_000


def plan(basis: PlanBasis, options: Options) -> Releases:
    """T PE iterations in the projection (1 <= p <= max(d, 16)), then the noisy counts (one
    release) and the noisy sums, priced as `sum_weight` releases (default: T)."""
    p = planned_projection_dim(basis, options)
    iterations = planned_iterations(options, lambda: default_projected_iterations(p))
    weight = check_integer(
        "sum_weight",
        iterations if options.sum_weight is None else options.sum_weight,
        1,
        MAX_HDPE_SUM_WEIGHT,
    )
    return Releases(
        iterations=iterations,
        parts=projected_parts(basis, iterations, weight),
        progress_total=iterations + 1,
        projection_dim=p,
    )


def run(start: RunStart, options: Options) -> Outcome:
    """Project (a Gaussian matrix from the job's generator), evolve in the projection, label
    every row by its nearest projected centre, and release each cluster's noisy mean."""
    plan = start.plan
    means = evolve_in_projection(start, options, plan.scheduled(NOISY_SUMS).weight)
    options.report(plan.progress_total, plan.progress_total)
    return Outcome(centres=means.centres, final_variations=means.final_variations)


METHOD = Method(
    name=Algorithm.HDPE_MEANS,
    plan=plan,
    run=run,
    evolves=True,
)


class HDPEKeywords(EvolutionKeywords, total=False):
    """hdpe_means's keywords: the projection's dimension and the noisy sums' pricing."""

    projection_dim: int
    sum_weight: int | None


def hdpe_means(X: np.ndarray, k: int, **keywords: Unpack[HDPEKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of high-dimensional X by HDPE-means.

    Rows are clipped into the ball (R, c) and projected by x_bar = G (x - c) / sqrt(p) with
    G ~ N(0, 1)^{p x d}; PE-means runs in R^p (ball of radius R) for `iterations` iterations
    (default floor(4 sqrt(p)) - 2); rows are labelled by their nearest projected centre and each
    cluster's centre is its noisy sum (exact on a grid of R / 2^20) over its noisy count. The
    sums are priced as `sum_weight` releases (default: as many as the PE iterations, so they
    get half of the releases' mu^2; their noise std is R sigma / sqrt(sum_weight)) and the
    counts as one; all T_total = iterations + 1 + sum_weight releases share sigma =
    sqrt(T_total)/mu, so the job is exactly mu-GDP (with its own row-count release when
    `n_public` is missing, as in pe_means). The projected rows are not clipped: they are only
    ever voted with and labelled, never summed. `progress(t, iterations + 1)` is called after
    each PE iteration and once more, after the final averaging step. Other arguments as for
    pe_means.
    """
    return run_method(METHOD, X, k, options_for(HDPEKeywords, keywords))
