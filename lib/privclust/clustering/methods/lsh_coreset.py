"""LSH-tree private coreset (after Chang and Kamath): a noisy prefix tree over hashed rows, its
leaves' noisy means weighted by their noisy counts, then non-private weighted k-means on them.

The method, in centred coordinates (every row has norm <= R):

1. Hash and 2. grow (privclust.clustering.mechanisms.lsh_tree): every row's SimHash code from random
   hyperplanes of the job's generator, and a prefix tree over the codes grown level by level
   from noisy child counts (one integer release per level, l2 sensitivity 1, sqrt(2) under
   replace-one); every decision reads only released counts and public thresholds.
3. Coreset. The leaves are the kept nodes without kept children (the root included). They are
   disjoint sets of rows, so the matrix of their exact grid sums (grid.cluster_grid_sums, R/2^20
   grid) has l2 sensitivity R (2R under replace-one) in grid units: one more integer release.
   Its noise std is sensitivity * sigma / sqrt(sum_weight), so that release is
   sqrt(sum_weight)/sigma-GDP, i.e. it is priced as `sum_weight` releases of noise multiplier
   sigma (its budget share is set by scaling its sensitivity, and every release shares one
   sigma). A leaf's weight is its already released noisy count; its point is its noisy sum over
   that count, projected into the ball.
4. Centres. Weighted k-means (k-means++, restarts) on the coreset: post-processing. With fewer
   than k coreset points, the rest of the k centres come from a data-independent sphere packing.

The run is (sqrt(levels + sum_weight)/sigma)-GDP = mu-GDP (plus the run's own row count when no
public count was given, exactly as in pe_means).

Defaults from public facts, after Google's DP clustering library (Chang and Kamath): about 20
hash bits in all (`DEFAULT_HASH_BITS`); a node needs min(10 sqrt(d) s, N~/(2k)) noisy rows to be
kept (s the noise std of one coordinate of a noisy sum, in units of R), here never fewer than
2.5 standard deviations of a count's noise (`COUNT_NOISE_FLOOR`), and 3 times that to branch.
The bits are grouped `bits_per_level` to a level here, because a level costs one release
whatever its branching factor (default 3 bits: 7 levels), and the sums get `sum_weight` =
3 x levels shares of the budget (bench/RESULTS.md, "LSH-tree coreset").
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.data.domain import project_into_ball
from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.evolution.packing import initial_population
from privclust.clustering.mechanisms.grid import grid_means, sum_sensitivity
from privclust.clustering.mechanisms.lsh_tree import grow_tree
from privclust.clustering.run.method import Method, RunStart
from privclust.clustering.run.options import (
    Options,
    RunKeywords,
    options_for,
)
from privclust.clustering.run.plan import PlanBasis, Releases, RunPlan
from privclust.clustering.run.result import ClusteringResult, Outcome
from privclust.clustering.run.runner import run_method
from privclust.clustering.run.schedule import NOISY_SUMS, TREE_COUNTS, Planned

# Google's library grows its tree to depth 20, one SimHash bit per level.
DEFAULT_HASH_BITS = 20
# Measured in bench/RESULTS.md ("LSH-tree coreset"): 3 or 4 bits per level beat Google's one bit
# per level (20 count releases) and 5; 3 gives 7 levels (21 bits).
DEFAULT_BITS_PER_LEVEL = 3
# Codes are packed into one int64 per row.
MAX_HASH_BITS = 62
# A child's count vector has 2^bits entries per branching node; this bounds it.
MAX_BITS_PER_LEVEL = 12
# By default the sums are priced as 3 releases per level: three quarters of mu^2 go to the sums,
# which need it more than the counts (measured: 1 or 2 per level lose up to 30% of AUC at k = 16,
# d = 64; 3 or 4 are best; 8 is no better).
DEFAULT_SUM_WEIGHT_PER_LEVEL = 3
MAX_SUM_WEIGHT = 1000
# A node is kept when its noisy count reaches min(NODE_NOISE_FACTOR sqrt(d) s, N~/(2k)): spread
# over that many rows, the noise of a sum is about a tenth of R per row (Google's heuristic).
NODE_NOISE_FACTOR = 10.0
BRANCH_FACTOR = 3
# ... and never below this many standard deviations of a count's noise: Gaussian count noise is
# wider than the discrete Laplace noise of Google's library, and with a lower threshold the
# children of a branching node that hold no row at all would pass it often and grow a tree of
# pure noise (2^bits_per_level children each): at 2.5 SD one empty child in ~160 is kept.
COUNT_NOISE_FLOOR = 2.5


def default_levels(bits_per_level: int) -> int:
    """ceil(DEFAULT_HASH_BITS / bits_per_level) levels: about 20 hash bits in all."""
    return max(1, -(-DEFAULT_HASH_BITS // bits_per_level))


def plan_lsh_releases(
    iterations: int | None, bits_per_level: int | None, sum_weight: int | None
) -> tuple[int, int, int]:
    """(levels, releases, progress_total) of an LSH-coreset run, from its parameters alone.

    One count release per level, and the sums priced as `sum_weight` releases; progress is
    reported after each level and once after the sums.
    """
    bits = check_integer(
        "bits_per_level",
        DEFAULT_BITS_PER_LEVEL if bits_per_level is None else bits_per_level,
        1,
        MAX_BITS_PER_LEVEL,
    )
    levels = (
        default_levels(bits) if iterations is None else check_integer("iterations", iterations, 1)
    )
    if levels * bits > MAX_HASH_BITS:
        raise ClusteringInputError(
            "iterations",
            f"iterations * bits_per_level (the hash length) must be at most {MAX_HASH_BITS}, "
            f"got {levels} * {bits}",
        )
    weight = check_integer(
        "sum_weight",
        DEFAULT_SUM_WEIGHT_PER_LEVEL * levels if sum_weight is None else sum_weight,
        1,
        MAX_SUM_WEIGHT,
    )
    return levels, levels + weight, levels + 1


def sum_noise_std(plan: RunPlan, sum_weight: int) -> float:
    """Noise std of one coordinate of a leaf's noisy sum, in units of R."""
    return plan.sum_sensitivity_factor * plan.sigma / math.sqrt(sum_weight)


def default_min_count(plan: RunPlan, sum_weight: int) -> int:
    """max(min(10 sqrt(d) s, N~/(2k)), COUNT_NOISE_FLOOR x the count noise std, 1), with
    s = sum_noise_std: public inputs only."""
    low_noise = NODE_NOISE_FACTOR * math.sqrt(plan.n_cols) * sum_noise_std(plan, sum_weight)
    per_cluster = plan.n_rows // (2 * plan.k)
    noise_floor = math.ceil(COUNT_NOISE_FLOOR * plan.count_sensitivity * plan.sigma)
    return max(1, min(math.floor(low_noise), per_cluster), noise_floor)


def weighted_kmeans(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    *,
    radius: float,
    rng: np.random.Generator,
    packing_rng: np.random.Generator | None,
    restarts: int,
) -> np.ndarray:
    """k centres from the weighted coreset: k-means++ with restarts, or, with at most k points,
    the points themselves completed by a data-independent sphere packing."""
    if len(points) <= k:
        if len(points) == k:
            return points.copy()
        pad = initial_population(k - len(points), points.shape[1], radius, packing_rng)
        return np.concatenate([points, pad])
    # Imported here, by the run: planning a job (in the API process) must not load scikit-learn.
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    model = KMeans(
        n_clusters=k,
        init="k-means++",
        n_init=restarts,
        random_state=int(rng.integers(2**31 - 1)),
    )
    with warnings.catch_warnings():
        # Fewer distinct coreset points than k: sklearn warns and still returns k centres.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(points, sample_weight=weights.astype(np.float64))
    return np.asarray(model.cluster_centers_, dtype=np.float64)


def plan(basis: PlanBasis, options: Options) -> Releases:
    """One count release per tree level, then the leaves' noisy sums (plan_lsh_releases)."""
    levels, releases, progress_total = plan_lsh_releases(
        options.iterations, options.bits_per_level, options.sum_weight
    )
    parts = (
        Planned(TREE_COUNTS, levels, basis.count_sensitivity),
        Planned(NOISY_SUMS, 1, sum_sensitivity(basis, basis.n_cols), releases - levels),
    )
    return Releases(iterations=levels, parts=parts, progress_total=progress_total)


def prepare(options: Options) -> Options:
    """The tree's thresholds and the k-means restarts checked before the run starts."""
    min_count, branch_count = options.min_count, options.branch_count
    return dataclasses.replace(
        options,
        min_count=None if min_count is None else check_integer("min_count", min_count, 1),
        branch_count=(
            None if branch_count is None else check_integer("branch_count", branch_count, 1)
        ),
        restarts=check_integer("restarts", options.restarts, 1),
    )


def released_coreset(start: RunStart, options: Options) -> tuple[np.ndarray, np.ndarray]:
    """(the coreset's points, their weights): the leaves' noisy means and noisy counts. The
    hyperplanes come from the job's generator (public randomness, independent of the data)."""
    points, plan, rng, radius = start.points, start.plan, start.rng, start.radius
    bits = DEFAULT_BITS_PER_LEVEL if options.bits_per_level is None else int(options.bits_per_level)
    weight = plan.scheduled(NOISY_SUMS).weight  # the sums' share, as plan_lsh_releases fixed it
    keep_at = default_min_count(plan, weight) if options.min_count is None else options.min_count
    branch_at = BRANCH_FACTOR * keep_at if options.branch_count is None else options.branch_count
    normals = rng.standard_normal(size=(plan.iterations * bits, points.shape[1]))
    tree = grow_tree(
        points,
        normals,
        plan,
        bits_per_level=bits,
        min_count=keep_at,
        branch_count=branch_at,
        radius=radius,
        sum_weight=weight,
        rng=rng,
        progress=options.progress,
    )
    return grid_means(tree.sums, tree.counts, radius), tree.counts


def run(start: RunStart, options: Options) -> Outcome:
    """The released coreset, then weighted k-means on it (post-processing)."""
    plan, radius = start.plan, start.radius
    coreset, counts = released_coreset(start, options)
    centres = weighted_kmeans(
        coreset,
        np.maximum(counts, 1),
        plan.k,
        radius=radius,
        rng=start.rng,
        packing_rng=options.rng,
        restarts=options.restarts,
    )
    project_into_ball(centres, radius)
    options.report(plan.progress_total, plan.progress_total)
    return Outcome(centres=centres)


METHOD = Method(
    name=Algorithm.LSH_CORESET,
    plan=plan,
    run=run,
    prepare=prepare,
)


class CoresetKeywords(RunKeywords, total=False):
    """lsh_coreset's keywords: its tree and the final weighted k-means's restarts."""

    bits_per_level: int | None
    sum_weight: int | None
    min_count: int | None
    branch_count: int | None
    restarts: int


def lsh_coreset(X: np.ndarray, k: int, **keywords: Unpack[CoresetKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of X from an LSH-tree private coreset; mu-GDP.

    `iterations` is the number of tree levels (default ceil(20 / bits_per_level)), each adding
    `bits_per_level` SimHash bits (default 3); `sum_weight` is the noisy sums' share of the
    budget counted in releases (default 3 per level: 3/4 of mu^2); `min_count` and
    `branch_count` override the noisy-count thresholds for keeping and branching a node
    (default max(1, min(10 sqrt(d) s, N~/(2k))) and 3 times that); `restarts` is the number of
    k-means++ restarts on the coreset. Privacy arguments, `n_public`, `relation`, `rng` and
    `progress` as for pe_means; `progress(t, levels + 1)` is called after each level and after
    the sums.
    """
    return run_method(METHOD, X, k, options_for(CoresetKeywords, keywords))
