"""PE-means (docs/algorithms.md section 4): private evolution of candidate centres by noisy votes"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privclust.clustering.histogram import adapt_variations, postprocess_votes
from privclust.clustering.nearest import GroupLayout
from privclust.clustering.packing import sphere_packing
from privclust.clustering.params import (
    DEFAULT_MAX_POPULATION,
    RunPlan,
    start_run,
)
from privclust.clustering.result import ClusteringResult
from privclust.clustering.selection import select_centres
from privclust.clustering.variation import levy_variations
from privclust.clustering.vote import nearest_candidate_votes, one_blas_thread
from privclust.clustering.vote_cells import VOTE_DTYPE
from privclust.privacy import noise

Progress = Callable[[int, int], object]
# Packings up to this many coordinates (16 MiB) are cached per shape; bigger ones are rare
# (high-dimensional PE-means) and would pin too much memory in a long-running worker.
PACKING_CACHE_MAX_VALUES = 1 << 21


# Cached packings are made for populations rounded up to a multiple of this and cut to size: the
# population follows the noisy row count, so an exact-size cache would rarely be hit.
PACKING_CACHE_STEP = 512


@functools.lru_cache(maxsize=8)
def _unit_packing(n: int, d: int) -> np.ndarray:
    # Data-independent, so one packing per shape can serve every job in this process.
    points = sphere_packing(n, d, 1.0, np.random.default_rng())
    points.flags.writeable = False
    return points


def initial_population(
    n: int, d: int, radius: float, rng: np.random.Generator | None
) -> np.ndarray:
    """The sphere-packing population of n candidates in the ball of `radius` around 0.

    With a caller's generator (tests, benchmarks) it is drawn from it; otherwise a packing of the
    unit ball of n rounded up to PACKING_CACHE_STEP points per d is computed once from OS entropy,
    and its first n points (a packing too: the points are accepted in a uniformly random order)
    are rescaled. It uses no private data, so sharing it between jobs costs no privacy.
    """
    if rng is not None:
        return sphere_packing(n, d, radius, rng)
    size = -(-n // PACKING_CACHE_STEP) * PACKING_CACHE_STEP
    if size * d > PACKING_CACHE_MAX_VALUES:
        return sphere_packing(n, d, radius, np.random.default_rng())
    return _unit_packing(size, d)[:n] * radius


@dataclass(frozen=True)
class Evolution:
    centres: np.ndarray
    final_variations: int


def evolve(
    points: np.ndarray,
    plan: RunPlan,
    *,
    radius: float,
    rng: np.random.Generator,
    packing_rng: np.random.Generator | None,
    progress: Progress | None,
) -> Evolution:
    """The PE-means loop on centred rows: `plan.iterations` noisy nearest-candidate histograms,
    each an integer Gaussian release of sensitivity `plan.count_sensitivity` with noise
    multiplier `plan.sigma`; everything else is post-processing of those releases and of the
    public row count `plan.n_rows`."""
    d = points.shape[1]
    k = plan.k
    population = initial_population((plan.variations + 1) * k, d, radius, packing_rng)
    current_l = plan.variations
    selection: np.ndarray | None = None
    layout: GroupLayout | None = None  # the sphere packing has no group structure
    sensitivity = plan.count_sensitivity
    # The variations are published post-processing; they take a fast generator keyed from rng
    # (noise.variation_generator), the noise stays on rng.
    variation_rng = noise.variation_generator(rng)
    with one_blas_thread():  # see there: idle BLAS threads would slow the next vote
        for t in range(1, plan.iterations + 1):
            votes = nearest_candidate_votes(points, population, layout)
            noisy = noise.integer_release(votes, sensitivity=sensitivity, sigma=plan.sigma, rng=rng)
            processed = postprocess_votes(noisy, plan.n_rows)
            selection = select_centres(population, processed, k, selection, rng)
            current_l = adapt_variations(
                current_l, processed, sensitivity * plan.sigma, len(population)
            )
            if t < plan.iterations:
                population = np.concatenate(
                    [selection, levy_variations(selection, current_l, radius, variation_rng)]
                )
                layout = GroupLayout(anchors=k, per_anchor=current_l)
            if progress is not None:
                progress(t, plan.progress_total)
    assert selection is not None  # iterations >= 1
    return Evolution(centres=selection, final_variations=current_l)


def pe_means(
    X: np.ndarray,
    k: int,
    *,
    radius: float,
    center: np.ndarray | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    variations: int | None = None,
    n_public: int | None = None,
    relation: str = "add-remove",
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
    max_population: int = DEFAULT_MAX_POPULATION,
) -> ClusteringResult:
    """Differentially private k-means centres of X by PE-means; mu-GDP for the requested mu.

    X is N x d (any real dtype; a read-only memmap is fine); rows are clipped into the ball of
    `radius` around `center` (the origin when None), which the data owner declares. Privacy is
    (epsilon, delta) or mu, exactly one, under add/remove neighbours by default. `n_public` is
    the dataset's released noisy row count N~; without it the run releases its own from a tenth
    of mu (see `plan_for_rows`). With `relation="replace-one"` N is public and every release is
    calibrated to replace-one sensitivities. T defaults to floor(4 sqrt(d)), times epsilon when
    epsilon > 1 (no scaling when only mu is given); L to max(N~/(5k), 4) capped so the
    population stays within `max_population`. `progress(t, T)` is called after each iteration
    and anything it raises propagates. `rng` is for tests only: by default every random number
    comes from a ChaCha20 generator keyed from OS entropy.
    """
    run = start_run(
        X,
        k,
        radius=radius,
        center=center,
        n_public=n_public,
        relation=relation,
        rng=rng,
        dtype=VOTE_DTYPE,  # the rows are only ever voted with
        algorithm="pe-means",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        max_population=max_population,
    )
    points, c, plan, noise_rng = run.points, run.center, run.plan, run.rng
    del run  # `points` is the one N x d working copy: freed with it below
    outcome = evolve(
        points, plan, radius=float(radius), rng=noise_rng, packing_rng=rng, progress=progress
    )
    del points
    return plan.result(outcome.centres, c, radius, outcome.final_variations)
