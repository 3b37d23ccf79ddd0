"""HDPE-means (docs/algorithms.md section 5): PE-means on a random projection, then noisy means."""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from privclust.clustering.kernels import ordered_products
from privclust.clustering.nearest import nearest_candidates
from privclust.clustering.params import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    RunPlan,
    start_run,
)
from privclust.clustering.pe import Progress, evolve
from privclust.clustering.result import ClusteringResult
from privclust.clustering.variation import project_into_ball
from privclust.privacy import noise

_BLOCK_ELEMENTS = 1 << 20
# Rows are summed on a fixed grid of R / 2^GRID_BITS: each clipped row becomes an integer vector
# of norm at most 2^GRID_BITS (1 + GRID_SLACK) + sqrt(d)/2, and per-cluster sums are exact int64.
# A 2^-20 relative grid moves a centre by less than 1e-6 R, far below the noise; the sums stay
# below 2^53 up to ~8e9 rows.
GRID_BITS = 20
# Covers the float rounding of x * 2^GRID_BITS / R for a row whose computed norm is <= R.
GRID_SLACK = 1e-9


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


def grid_sensitivity(n_cols: int) -> float:
    """l2 norm bound of one clipped row on the grid, in grid units (a row's add/remove effect
    on the matrix of per-cluster grid sums)."""
    return 2.0**GRID_BITS * (1.0 + GRID_SLACK) + 0.5 * math.sqrt(n_cols)


def cluster_grid_sums(
    points: np.ndarray, labels: np.ndarray, k: int, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-cluster sums of the rows on the grid R / 2^GRID_BITS (k x d int64, in grid
    units) and per-cluster counts (k int64), clusters 0..k-1."""
    scale = 2.0**GRID_BITS / radius
    sums = np.zeros((k, points.shape[1]), dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // points.shape[1])
    for start in range(0, len(points), rows):
        part = labels[start : start + rows]
        units = np.rint(points[start : start + rows] * scale).astype(np.int64)
        onehot = sparse.csr_matrix(
            (np.ones(part.size, dtype=np.int64), (part, np.arange(part.size))),
            shape=(k, part.size),
        )
        sums += onehot @ units
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return sums, counts


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
    d = sums.shape[1]
    noisy_sums = noise.integer_release(
        sums,
        sensitivity=plan.sum_sensitivity_factor * grid_sensitivity(d) / math.sqrt(sum_weight),
        sigma=plan.sigma,
        rng=rng,
    )
    noisy_counts = noise.integer_release(
        counts, sensitivity=plan.count_sensitivity, sigma=plan.sigma, rng=rng
    )
    unit = radius * 2.0**-GRID_BITS
    centres = noisy_sums.astype(np.float64) * unit / np.maximum(noisy_counts, 1)[:, None]
    return project_into_ball(centres, radius)


def hdpe_means(
    X: np.ndarray,
    k: int,
    *,
    radius: float,
    center: np.ndarray | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    projection_dim: int = DEFAULT_PROJECTION_DIM,
    iterations: int | None = None,
    variations: int | None = None,
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
    max_population: int = DEFAULT_MAX_POPULATION,
    n_public: int | None = None,
    relation: str = "add-remove",
    sum_weight: int | None = None,
) -> ClusteringResult:
    """Differentially private k-means centres of high-dimensional X by HDPE-means.

    Rows are clipped into the ball (R, c) and projected by x_bar = G (x - c) / sqrt(p) with
    G ~ N(0, 1)^{p x d}; PE-means runs in R^p (ball of radius R) for `iterations` iterations
    (default floor(4 sqrt(p)) - 2); rows are labelled by their nearest projected centre and each
    cluster's centre is its noisy sum (exact on a grid of R / 2^20) over its noisy count. The
    sums are priced as `sum_weight` releases (default: as many as the PE iterations, so they
    get half of the releases' mu^2; their noise std is R sigma / sqrt(sum_weight)) and the
    counts as one; all
    T_total = iterations + 1 + sum_weight releases share sigma = sqrt(T_total)/mu, so the job is
    exactly mu-GDP (with its own row-count release when `n_public` is missing, as in pe_means). The
    projected rows are not clipped: they are only ever voted with and labelled, never summed.

    `progress(t, iterations + 1)` is called after each PE iteration and once more, with
    t = iterations + 1, after the final averaging step. Other arguments as for pe_means.
    """
    run = start_run(
        X,
        k,
        radius=radius,
        center=center,
        n_public=n_public,
        relation=relation,
        rng=rng,
        algorithm="hdpe-means",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        projection_dim=projection_dim,
        max_population=max_population,
        sum_weight=sum_weight,
    )
    points, c, plan, noise_rng = run.points, run.center, run.plan, run.rng
    del run  # `points` is the one N x d working copy: freed with it below
    radius = float(radius)
    n_cols = points.shape[1]
    assert plan.projection_dim is not None
    matrix = noise_rng.standard_normal(size=(plan.projection_dim, n_cols))
    projected = project_rows(points, matrix)  # no BLAS (compiled): no threads left spinning
    outcome = evolve(
        projected, plan, radius=radius, rng=noise_rng, packing_rng=rng, progress=progress
    )
    labels = nearest_candidates(projected, outcome.centres)
    del projected
    sums, counts = cluster_grid_sums(points, labels, plan.k, radius)
    del points
    # The plan prices the sums as the releases beyond the PE iterations and the counts.
    weight = plan.releases - plan.iterations - 1
    centres = noisy_means(sums, counts, plan, radius=radius, rng=noise_rng, sum_weight=weight)
    if progress is not None:
        progress(plan.progress_total, plan.progress_total)
    return plan.result(centres, c, radius, outcome.final_variations)
