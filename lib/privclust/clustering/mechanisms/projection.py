"""PE-means in a random projection, then the clusters' noisy means in the full space: HDPE-means'
run (docs/algorithms.md section 5) and the first stage of pe-lloyd above its projection
threshold (section 10).

The rows are projected to p dimensions by a Gaussian matrix drawn from the job's generator,
each row's projection a function of that row and the matrix alone; the population evolves
there; every row is labelled by its nearest projected centre; and each cluster's noisy grid sum
(sensitivity R) over its noisy count (sensitivity 1) is its centre in the full space.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from privclust.clustering.data.rows import Part, token
from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.evolution.kernels import ordered_products
from privclust.clustering.evolution.nearest import nearest_candidates
from privclust.clustering.mechanisms.grid import (
    cluster_grid_sums,
    grid_means,
    mean_noises,
    mean_parts,
)
from privclust.clustering.mechanisms.search import search
from privclust.clustering.run.method import RunStart
from privclust.clustering.run.options import DEFAULT_PROJECTION_DIM, Options
from privclust.clustering.run.plan import PlanBasis, vote_histograms
from privclust.clustering.run.schedule import Planned

# Values per block of the projection (bounds a block's view and its output).
_BLOCK_ELEMENTS = 1 << 20
# When noisy Lloyd steps follow the stage (pe-lloyd), its noisy sums are priced as this many
# times the stage's other releases (the T vote histograms and the counts): with the Lloyd
# steps' 30%, the job's mu^2 goes 30% to the votes and counts, 40% to the sums and 30% to the
# Lloyd steps (the runs with this split: bench/RESULTS.md, "auto at every dimension").
SUMS_PER_STAGE_RELEASE = 4.0 / 3.0


def default_projected_iterations(projection_dim: int) -> int:
    """PE iterations in a p-dimensional projection: T_total - 2 with T_total = floor(4 sqrt(p))
    (14 for p = 16), HDPE-means' published rule."""
    return max(math.isqrt(16 * projection_dim) - 2, 1)


def sum_weight_before_lloyd(iterations: int) -> int:
    """The releases the stage's noisy sums are priced as when Lloyd steps follow it:
    SUMS_PER_STAGE_RELEASE x (T + 1), at least 1 (20 for T = 14)."""
    return max(1, round(SUMS_PER_STAGE_RELEASE * (iterations + 1)))


def planned_projection_dim(basis: PlanBasis, options: Options) -> int:
    """p: the caller's `projection_dim` (default 16), an integer in [1, max(d, 16)]."""
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
    return p


def projected_parts(basis: PlanBasis, iterations: int, sum_weight: int) -> tuple[Planned, ...]:
    """The releases of `evolve_in_projection`, in order: T vote histograms in the projection,
    then the clusters' noisy sums (priced as `sum_weight` releases) and counts in the full
    space (`grid.mean_parts`)."""
    return (vote_histograms(basis, iterations), *mean_parts(basis, basis.n_cols, sum_weight))


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


@dataclass(frozen=True, eq=False)
class ProjectedClusterSums:
    """A pass's statistic: every row labelled by its nearest projected centre, then each
    cluster's exact grid sums and counts in the full space (`cluster_grid_sums`)."""

    projection: Callable[[np.ndarray], np.ndarray]
    key: str
    centres: np.ndarray
    radius: float

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        projected = part.derived(self.key, self.projection)
        labels = nearest_candidates(projected.points, self.centres)
        part.forget(self.key)  # the last pass that reads the projection
        return cluster_grid_sums(part.points, labels, len(self.centres), self.radius)


@dataclass(frozen=True)
class ProjectedMeans:
    """The released means of the clusters a projected PE-means labelled (centred coordinates,
    every cluster, empty or not), their released noisy counts and PE-means' final L."""

    centres: np.ndarray
    counts: np.ndarray
    final_variations: int


def evolve_in_projection(start: RunStart, options: Options, sum_weight: int) -> ProjectedMeans:
    """Project (a Gaussian matrix from the job's generator), run `start.plan.iterations`
    PE-means iterations in the projection (their vote histograms are the plan's first
    releases), label every row by its nearest projected centre, and release each cluster's
    noisy grid sum, priced as `sum_weight` releases, and its noisy count, one release
    (`grid.mean_noises`). Progress is reported after each PE iteration."""
    points, plan, rng, radius = start.points, start.plan, start.rng, start.radius
    assert plan.projection_dim is not None
    matrix = rng.standard_normal(size=(plan.projection_dim, points.shape[1]))
    # Each partition is projected where it is read, once (no BLAS: compiled, no threads left
    # spinning), and the projection kept for the passes that follow.
    projection = partial(project_rows, matrix=matrix)  # x -> G x / sqrt(p), the public G
    projected = points.projected(matrix, projection)
    outcome = search(projected, start, options)
    noisy_sums, noisy_counts = points.release(
        ProjectedClusterSums(projection, token(matrix), outcome.centres, radius),
        mean_noises(plan, points.shape[1], sum_weight),
        rng,
    )
    centres = grid_means(noisy_sums, noisy_counts, radius)
    return ProjectedMeans(centres, noisy_counts, outcome.final_variations)
