"""HDPE-means (ALGORITHM.md section 3): PE-means on a random projection, then noisy averaging."""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from app.clustering import noise
from app.clustering.params import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    data_shape,
    plan_run,
    prepare_rows,
)
from app.clustering.pe import Progress, evolve
from app.clustering.result import ClusteringResult
from app.clustering.variation import project_into_ball
from app.clustering.voting import nearest_candidates

_BLOCK_ELEMENTS = 1 << 20


def project_rows(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """x_bar = G x / sqrt(p) for every row, in blocks (p = rows of G)."""
    p = matrix.shape[0]
    scaled_t = np.ascontiguousarray(matrix.T / math.sqrt(p))
    out = np.empty((len(points), p), dtype=np.float64)
    rows = max(1, _BLOCK_ELEMENTS // max(points.shape[1], p))
    for start in range(0, len(points), rows):
        np.matmul(points[start : start + rows], scaled_t, out=out[start : start + rows])
    return out


def cluster_sums(points: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-cluster sums of the rows (k x d) and counts (k), clusters 0..k-1."""
    sums = np.zeros((k, points.shape[1]))
    rows = max(1, _BLOCK_ELEMENTS // points.shape[1])
    for start in range(0, len(points), rows):
        part = labels[start : start + rows]
        onehot = sparse.csr_matrix(
            (np.ones(part.size), (part, np.arange(part.size))), shape=(k, part.size)
        )
        sums += onehot @ points[start : start + rows]
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    return sums, counts


def noisy_means(
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    radius: float,
    sigma: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The two final Gaussian releases and the centres they give (centred coordinates).

    Sums get isotropic N(0, (R sigma)^2) noise, one independent draw per coordinate (sensitivity
    R: every row has norm <= R); counts get N(0, sigma^2) (sensitivity 1). Every cluster is
    released and returned, empty or not: skipping one would depend on private data.
    """
    noisy_sums = noise.gaussian_release(sums, sensitivity=radius, sigma=sigma, rng=rng)
    noisy_counts = noise.gaussian_release(counts, sensitivity=1.0, sigma=sigma, rng=rng)
    centres = noisy_sums / np.maximum(noisy_counts, 1.0)[:, None]
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
) -> ClusteringResult:
    """Differentially private k-means centres of high-dimensional X by HDPE-means.

    Rows are clipped into the ball (R, c) and projected by x_bar = G (x - c) / sqrt(p) with
    G ~ N(0, 1)^{p x d}; PE-means runs in R^p (ball of radius R) for `iterations` iterations
    (default floor(4 sqrt(p)) - 2); rows are labelled by their nearest projected centre and each
    cluster's centre is its noisy sum over its noisy count. All T_total = iterations + 2
    releases share sigma = sqrt(T_total)/mu, so the job is exactly mu-GDP. The projected rows
    are not clipped: they are only ever voted with and labelled, never summed.

    `progress(t, iterations + 1)` is called after each PE iteration and once more, with
    t = iterations + 1, after the final averaging step. Other arguments as for pe_means.
    """
    n_rows, n_cols = data_shape(X)
    plan = plan_run(
        n_rows,
        n_cols,
        k,
        algorithm="hdpe-means",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        projection_dim=projection_dim,
        max_population=max_population,
    )
    assert plan.projection_dim is not None
    points, c = prepare_rows(X, radius, center)
    radius = float(radius)
    noise_rng = rng if rng is not None else np.random.default_rng()
    matrix = noise_rng.standard_normal(size=(plan.projection_dim, n_cols))
    projected = project_rows(points, matrix)
    outcome = evolve(
        projected,
        plan.k,
        radius=radius,
        sigma=plan.sigma,
        iterations=plan.iterations,
        variations=plan.variations,
        rng=noise_rng,
        packing_rng=rng,
        progress=progress,
        progress_total=plan.progress_total,
    )
    labels = nearest_candidates(projected, outcome.centres)
    del projected
    sums, counts = cluster_sums(points, labels, plan.k)
    del points
    centres = noisy_means(sums, counts, radius=radius, sigma=plan.sigma, rng=noise_rng) + c
    if progress is not None:
        progress(plan.progress_total, plan.progress_total)
    return plan.result(centres, outcome.final_variations)
