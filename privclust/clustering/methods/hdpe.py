"""HDPE-means (docs/algorithms.md section 5): PE-means on a random projection, then noisy means
of the clusters it labels."""

from __future__ import annotations

import math
from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.evolution import evolve
from privclust.clustering.grid import (
    cluster_grid_sums,
    grid_means,
    largest_sum_sensitivity,
    release_grid_sums,
)
from privclust.clustering.kernels import ordered_products
from privclust.clustering.method import Method, RunStart
from privclust.clustering.nearest import nearest_candidates
from privclust.clustering.options import (
    DEFAULT_PROJECTION_DIM,
    EvolutionKeywords,
    Options,
    options_for,
)
from privclust.clustering.plan import PlanBasis, Releases, RunPlan, planned_iterations
from privclust.clustering.result import ClusteringResult, Outcome
from privclust.clustering.runner import run_method
from privclust.privacy import noise

# Values per block of the projection (bounds a block's view and its output).
_BLOCK_ELEMENTS = 1 << 20
# HDPE-means's final noisy sums are priced, by default, as many releases as its PE iterations:
# half of the releases' mu^2 goes to the d-dimensional sums, whose noise otherwise dominates
# the loss (bench/RESULTS.md, "HDPE-means: the loss"). The published split is 1.
MAX_HDPE_SUM_WEIGHT = 10_000


def default_hdpe_iterations(projection_dim: int) -> int:
    """PE iterations of HDPE-means: T_total - 2 with T_total = floor(4 sqrt(p)) (14 for p = 16)."""
    return max(math.isqrt(16 * projection_dim) - 2, 1)


def plan(basis: PlanBasis, options: Options) -> Releases:
    """T PE iterations in the projection (1 <= p <= max(d, 16)), then the noisy counts (one
    release) and the noisy sums, priced as `sum_weight` releases (default: T)."""
    p = check_integer(
        "projection_dim",
        DEFAULT_PROJECTION_DIM if options.projection_dim is None else options.projection_dim,
        1,
    )
    if p > max(basis.n_cols, DEFAULT_PROJECTION_DIM):
        raise ClusteringInputError(
            "projection_dim",
            f"projection_dim must be at most max(d, {DEFAULT_PROJECTION_DIM}) = "
            f"{max(basis.n_cols, DEFAULT_PROJECTION_DIM)}, got {p}",
        )
    iterations = planned_iterations(options, lambda: default_hdpe_iterations(p))
    weight = check_integer(
        "sum_weight", iterations if options.sum_weight is None else options.sum_weight, 1
    )
    if weight > MAX_HDPE_SUM_WEIGHT:
        raise ClusteringInputError(
            "sum_weight", f"sum_weight must be at most {MAX_HDPE_SUM_WEIGHT}, got {weight}"
        )
    return Releases(
        iterations=iterations,
        releases=iterations + 1 + weight,
        progress_total=iterations + 1,
        projection_dim=p,
    )


def project_rows(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """x_bar = G x / sqrt(p) for every row (p = rows of G), as float64.

    Each row's projection is a function of that row and G alone (`kernels.ordered_products`:
    a sum in coordinate order, whatever the other rows), never a BLAS product: its vote must
    not change when another row is added or removed. Rows are read in blocks, as they are (a
    float32 or memory-mapped copy is widened one element at a time, never copied)."""
    p = matrix.shape[0]
    scaled_t = np.ascontiguousarray(matrix.T / math.sqrt(p), dtype=np.float64)
    out = np.empty((len(points), p), dtype=np.float64)
    rows = max(1, _BLOCK_ELEMENTS // max(points.shape[1], p))
    for start in range(0, len(points), rows):
        block = np.asarray(points[start : start + rows])  # a view, also of a memmap
        ordered_products(block, scaled_t, out[start : start + rows])
    return out


def noisy_means(
    sums: np.ndarray,
    counts: np.ndarray,
    plan: RunPlan,
    *,
    radius: float,
    rng: np.random.Generator,
    sum_weight: int = 1,
) -> np.ndarray:
    """The two final Gaussian releases and the centres they give (centred coordinates).

    Both are integer releases (privclust.privacy.noise): the grid sums get isotropic noise of std
    Delta * sigma per coordinate, one independent draw each, with Delta = grid_sensitivity (2x
    under replace-one: R or 2R in grid units); the counts get std
    sensitivity * sigma (1, or sqrt(2) under replace-one). Every cluster is released and
    returned, empty or not: skipping one would depend on private data. The centres are a
    quotient of released integers: post-processing. `sum_weight` w divides the sums'
    sensitivity by sqrt(w): their noise std is Delta sigma / sqrt(w), priced as w releases.
    """
    noisy_sums = release_grid_sums(sums, plan, rng, sum_weight)
    noisy_counts = noise.integer_release(
        counts, sensitivity=plan.count_sensitivity, sigma=plan.sigma, rng=rng
    )
    return grid_means(noisy_sums, noisy_counts, radius)


def run(start: RunStart, options: Options) -> Outcome:
    """Project (a Gaussian matrix from the job's generator), evolve in the projection, label
    every row by its nearest projected centre, and release each cluster's noisy mean."""
    points, plan, rng, radius = start.points, start.plan, start.rng, start.radius
    assert plan.projection_dim is not None
    matrix = rng.standard_normal(size=(plan.projection_dim, points.shape[1]))
    projected = project_rows(points, matrix)  # no BLAS (compiled): no threads left spinning
    outcome = evolve(
        projected, plan, radius=radius, rng=rng, packing_rng=options.rng, progress=options.progress
    )
    labels = nearest_candidates(projected, outcome.centres)
    del projected
    sums, counts = cluster_grid_sums(points, labels, plan.k, radius)
    # The plan prices the sums as the releases beyond the PE iterations and the counts.
    weight = plan.releases - plan.iterations - 1
    centres = noisy_means(sums, counts, plan, radius=radius, rng=rng, sum_weight=weight)
    if options.progress is not None:
        options.progress(plan.progress_total, plan.progress_total)
    return Outcome(centres=centres, final_variations=outcome.final_variations)


METHOD = Method(
    name=Algorithm.HDPE_MEANS,
    plan=plan,
    run=run,
    sensitivity=lambda plan, options: largest_sum_sensitivity(plan),
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
