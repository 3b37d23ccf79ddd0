"""Sums of rows on a fixed grid: exact per-cluster integer sums, their sensitivity, their noisy
release and the means it gives (HDPE-means' final step, the LSH coreset's points, the Lloyd
steps of FastLloyd and pe-lloyd).

Rows are summed on a grid of R / 2^GRID_BITS (offsets from a centre, on a grid of r / 2^GRID_BITS):
each clipped row becomes an integer vector of norm at most 2^GRID_BITS (1 + GRID_SLACK) +
sqrt(d)/2, so a row's effect on the matrix of sums is bounded whatever the data, and the sums
are exact int64 that an integer Gaussian release (privclust.privacy.noise) takes as they are.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from privclust.clustering.data.domain import project_into_ball
from privclust.clustering.data.release import Gaussian, central_release
from privclust.clustering.run.plan import Calibrated, RunPlan
from privclust.clustering.run.schedule import NOISY_COUNTS, NOISY_SUMS, Planned, filled

# A 2^-20 relative grid moves a centre by less than 1e-6 R, far below the noise; the sums stay
# below 2^53 up to ~8e9 rows.
GRID_BITS = 20
# Covers the float rounding of x * 2^GRID_BITS / R for a row whose computed norm is <= R.
GRID_SLACK = 1e-9
# Values per block when putting rows on the grid (bounds the int64 copy of a block).
_BLOCK_ELEMENTS = 1 << 20


def grid_sensitivity(n_cols: int) -> float:
    """l2 norm bound of one clipped row on the grid, in grid units (a row's add/remove effect
    on the matrix of per-cluster grid sums)."""
    return 2.0**GRID_BITS * (1.0 + GRID_SLACK) + 0.5 * math.sqrt(n_cols)


def sum_sensitivity(plan: Calibrated, n_cols: int) -> float:
    """l2 sensitivity of the grid sums of disjoint sets of rows on d columns, in grid units:
    grid_sensitivity(d), twice that under replace-one (R or 2R)."""
    return plan.sum_sensitivity_factor * grid_sensitivity(n_cols)


def _add_by_cluster(sums: np.ndarray, labels: np.ndarray, units: np.ndarray) -> None:
    """sums[j] += the rows of `units` labelled j, for every cluster j, exactly (int64)."""
    onehot = sparse.csr_matrix(
        (np.ones(labels.size, dtype=np.int64), (labels, np.arange(labels.size))),
        shape=(sums.shape[0], labels.size),
    )
    sums += onehot @ units


def _within_radius(block: np.ndarray, radius: float) -> np.ndarray:
    """A float64 copy of rows of another dtype, each put back within `radius` when its
    rounding to that dtype left it a hair outside (float32 rounds a coordinate up by up to
    6e-8 of it, more than GRID_SLACK covers)."""
    return project_into_ball(np.asarray(block, dtype=np.float64), radius)


def cluster_grid_sums(
    points: np.ndarray, labels: np.ndarray, k: int, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-cluster sums of the rows on the grid R / 2^GRID_BITS (k x d int64, in grid
    units) and per-cluster counts (k int64), clusters 0..k-1. Rows of norm at most R (the
    clipped rows; a float32 copy's rows are put back within R first), so one row moves the
    sums by at most grid_sensitivity(d)."""
    scale = 2.0**GRID_BITS / radius
    sums = np.zeros((k, points.shape[1]), dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // points.shape[1])
    for start in range(0, len(points), rows):
        block = points[start : start + rows]
        if block.dtype != np.float64:
            block = _within_radius(block, radius)
        units = np.rint(block * scale).astype(np.int64)
        _add_by_cluster(sums, labels[start : start + rows], units)
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return sums, counts


def relative_grid_sums(
    points: np.ndarray, centres: np.ndarray, labels: np.ndarray, step: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster exact sums (k x d int64, grid units of step / 2^GRID_BITS) of the rows'
    offsets from their centre, each clipped to norm `step`, and the per-cluster counts.
    `step` is one radius, or one per cluster (each cluster's sum then in its own grid units,
    so the bound below holds in grid units for every cluster alike).

    Each offset is scaled by 2^GRID_BITS / max(||x - mu||, step), so its norm on the grid is
    at most 2^GRID_BITS (up to float rounding, covered by GRID_SLACK) before rounding, and at
    most grid_sensitivity(d) after: that is the sum's sensitivity whatever the data.

    No overflow for N <= 10^8 rows: every coordinate of a rounded offset is at most
    2^20 (1 + 1e-9) + 1/2 < 2^20 + 1 in absolute value, so a cluster's sum is below
    10^8 (2^20 + 1) < 1.05e14 < 2^47, and M * count <= 2^31 * 10^8 < 2^58 (the Lloyd step's
    joint release); the noise added to either has std at most MAX_NOISE_STD = 1e13 < 2^44 (a
    draw beyond 2^53 is ~900 std out). All of this stays far below 2^63 (int64), and below
    2^53, so the float conversion of a released sum is exact too.
    """
    k, d = centres.shape
    sums = np.zeros((k, d), dtype=np.int64)
    top = 2.0**GRID_BITS
    rows = max(1, _BLOCK_ELEMENTS // d)
    for start in range(0, len(points), rows):
        part = labels[start : start + rows]
        offsets = points[start : start + rows] - centres[part]
        norms = np.sqrt(np.einsum("ij,ij->i", offsets, offsets))
        radii = step if np.ndim(step) == 0 else np.asarray(step)[part]
        offsets *= (top / np.maximum(norms, radii))[:, None]
        _add_by_cluster(sums, part, np.rint(offsets).astype(np.int64))
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return sums, counts


def mean_parts(plan: Calibrated, n_cols: int, sum_weight: int = 1) -> tuple[Planned, Planned]:
    """The two releases of clusters' means, in order: the grid sums (`sum_sensitivity`,
    priced as `sum_weight` releases: their noise std is Delta sigma / sqrt(sum_weight) per
    coordinate, one independent draw each), then the counts (count_sensitivity: 1, or sqrt(2)
    under replace-one). Every cluster is released, empty or not: skipping one would depend on
    private data."""
    return (
        Planned(NOISY_SUMS, 1, sum_sensitivity(plan, n_cols), sum_weight),
        Planned(NOISY_COUNTS, 1, plan.count_sensitivity),
    )


def mean_noises(plan: RunPlan, n_cols: int, sum_weight: int = 1) -> tuple[Gaussian, ...]:
    """The noise of `mean_parts` at the plan's sigma."""
    return tuple(entry.noise for entry in filled(mean_parts(plan, n_cols, sum_weight), plan.sigma))


def release_means(
    sums: np.ndarray,
    counts: np.ndarray,
    plan: RunPlan,
    radius: float,
    rng: np.random.Generator,
    sum_weight: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """`mean_noises` added centrally to sums and counts already computed (an audit's or a
    study's arrays; a run releases them through its rows), and the means they give (as
    `grid_means`). Returns (the means, the noisy counts).

    HDPE-means' two final Gaussian releases, both integer releases (privclust.privacy.noise):
    the grid sums get isotropic noise of std Delta * sigma per coordinate, one independent
    draw each, with Delta = grid_sensitivity (2x under replace-one: R or 2R in grid units);
    the counts get std sensitivity * sigma (1, or sqrt(2) under replace-one). Every cluster is
    released and returned, empty or not: skipping one would depend on private data. The means
    are a quotient of released integers: post-processing. `sum_weight` w divides the sums'
    sensitivity by sqrt(w): their noise std is Delta sigma / sqrt(w), priced as w releases."""
    noises = mean_noises(plan, sums.shape[1], sum_weight)
    noisy_sums, noisy_counts = central_release((sums, counts), noises, rng)
    return grid_means(noisy_sums, noisy_counts, radius), noisy_counts


def grid_means(noisy_sums: np.ndarray, counts: np.ndarray, radius: float) -> np.ndarray:
    """Released grid sums over released counts (at least 1), in the rows' units and projected
    into the ball: post-processing of the releases."""
    unit = radius * 2.0**-GRID_BITS
    means = noisy_sums.astype(np.float64) * unit / np.maximum(counts, 1)[:, None]
    return project_into_ball(means, radius)
