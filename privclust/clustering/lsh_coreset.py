"""LSH-tree private coreset (after Chang and Kamath): a noisy prefix tree over hashed rows, its
leaves' noisy means weighted by their noisy counts, then non-private weighted k-means on them.

The method, in centred coordinates (every row has norm <= R):

1. Hash. `levels * bits_per_level` random hyperplanes through the domain centre (Gaussian normal
   vectors from the job's generator: public randomness, independent of the data) give every row
   a SimHash code, the signs of its projections. Level t of the tree looks at the first
   t * bits_per_level bits, so a node is a code prefix and has 2^bits_per_level children.
2. Grow. The root holds every row; its count is the public N~ (no release). At each level the
   children of every *branching* node are counted and the whole vector of those counts is one
   integer Gaussian release: a row lies in exactly one node per level, so the vector has l2
   sensitivity 1 (sqrt(2) under replace-one). Every child of a branching node is released, empty
   or not. A child is kept when its noisy count is at least `min_count`; a kept child branches
   at the next level when its noisy count is at least `branch_count`. Every decision reads only
   released counts and public thresholds: post-processing. A planned level whose frontier is
   empty still makes its (empty) release, so every run makes the same sequence of releases.
3. Coreset. The leaves are the kept nodes without kept children (the root included). They are
   disjoint sets of rows, so the matrix of their exact grid sums (hdpe.cluster_grid_sums, R/2^20
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

import math
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.hdpe import GRID_BITS, cluster_grid_sums, grid_sensitivity
from privclust.clustering.kernels import ordered_products
from privclust.clustering.params import (
    RunPlan,
    check_integer,
    start_run,
)
from privclust.clustering.pe import Progress, initial_population
from privclust.clustering.result import ClusteringResult
from privclust.clustering.variation import project_into_ball
from privclust.privacy import noise

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
KMEANS_RESTARTS = 10
# At most this many nodes branch at a level (those with the largest noisy counts; the others
# become leaves), which bounds the count vectors and the coreset whatever the thresholds.
MAX_BRANCHING_NODES = 4096
_BLOCK_ELEMENTS = 1 << 20


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
    )
    if bits > MAX_BITS_PER_LEVEL:
        raise ClusteringInputError(
            "bits_per_level", f"bits_per_level must be at most {MAX_BITS_PER_LEVEL}, got {bits}"
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
    )
    if weight > MAX_SUM_WEIGHT:
        raise ClusteringInputError(
            "sum_weight", f"sum_weight must be at most {MAX_SUM_WEIGHT}, got {weight}"
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


def hash_codes(points: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """Each row's SimHash code as an int64: bit j (from the top) is [<x, normal_j> >= 0].

    The products come from `kernels.ordered_products` (a sum in coordinate order), not BLAS, so
    a row's code depends on that row and the normals alone, even for a row within rounding of
    a hyperplane: adding or removing a row cannot change another row's bits."""
    n_bits = normals.shape[0]
    weights = np.left_shift(np.int64(1), np.arange(n_bits - 1, -1, -1, dtype=np.int64))
    codes = np.empty(len(points), dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // max(points.shape[1], n_bits))
    normals_t = np.ascontiguousarray(normals.T, dtype=np.float64)
    products = np.empty((min(rows, len(points)), n_bits), dtype=np.float64)
    for start in range(0, len(points), rows):
        block = np.asarray(points[start : start + rows])  # a view, also of a memmap
        part = products[: len(block)]
        ordered_products(block, normals_t, part)
        codes[start : start + rows] = (part >= 0.0) @ weights
    return codes


def branching_nodes(counts: np.ndarray, branch_count: int) -> np.ndarray:
    """Which nodes branch: noisy count >= branch_count, at most MAX_BRANCHING_NODES of them (the
    largest counts, ties to the lower index)."""
    branching = counts >= branch_count
    if int(branching.sum()) > MAX_BRANCHING_NODES:
        order = np.argsort(-counts, kind="stable")[:MAX_BRANCHING_NODES]
        branching = np.zeros(len(counts), dtype=bool)
        branching[order] = True
    return branching


def grow_tree(
    codes: np.ndarray,
    plan: RunPlan,
    *,
    bits_per_level: int,
    min_count: int,
    branch_count: int,
    rng: np.random.Generator,
    progress: Progress | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(leaf of every row, -1 for rows in no leaf; noisy count of every leaf).

    One integer release per level (plan.iterations of them) of the counts of all children of the
    branching nodes; see the module docstring.
    """
    levels = plan.iterations
    fanout = 1 << bits_per_level
    digit_mask = np.int64(fanout - 1)
    n_bits = levels * bits_per_level
    leaf = np.full(len(codes), -1, dtype=np.int64)
    leaf_counts: list[np.ndarray] = []
    n_leaves = 0
    # Kept nodes of the current level: each row's node (-1: none), their noisy counts, and
    # which of them branch.
    node = np.zeros(len(codes), dtype=np.int64)
    counts = np.array([plan.n_rows], dtype=np.int64)
    branching = branching_nodes(counts, branch_count)

    def close_leaves(is_leaf: np.ndarray) -> None:
        nonlocal n_leaves
        ids = np.full(len(is_leaf), -1, dtype=np.int64)
        ids[is_leaf] = np.arange(n_leaves, n_leaves + int(is_leaf.sum()))
        member = node >= 0
        leaf[member] = np.where(is_leaf[node[member]], ids[node[member]], leaf[member])
        leaf_counts.append(counts[is_leaf])
        n_leaves += int(is_leaf.sum())

    for t in range(1, levels + 1):
        parents = np.flatnonzero(branching)
        slot = np.full(len(counts), -1, dtype=np.int64)
        slot[parents] = np.arange(len(parents))
        member = node >= 0
        row_slot = np.full(len(codes), -1, dtype=np.int64)
        row_slot[member] = slot[node[member]]
        moving = row_slot >= 0
        shift = n_bits - t * bits_per_level
        digit = (codes[moving] >> shift) & digit_mask
        child_of_row = row_slot[moving] * fanout + digit
        exact = np.bincount(child_of_row, minlength=len(parents) * fanout).astype(np.int64)
        noisy = noise.integer_release(
            exact, sensitivity=plan.count_sensitivity, sigma=plan.sigma, rng=rng
        )
        kept = noisy >= min_count
        has_kept_child = kept.reshape(len(parents), fanout).any(axis=1)
        # Leaves of this level: kept nodes that did not branch, or branched into nothing kept.
        is_leaf = ~branching
        is_leaf[parents[~has_kept_child]] = True
        close_leaves(is_leaf)
        # The next level: the kept children; every other row is in no node from now on.
        new_index = np.full(len(kept), -1, dtype=np.int64)
        new_index[kept] = np.arange(int(kept.sum()))
        node = np.full(len(codes), -1, dtype=np.int64)
        node[moving] = new_index[child_of_row]
        counts = noisy[kept]
        branching = (
            branching_nodes(counts, branch_count) if t < levels else np.zeros(len(counts), bool)
        )
        if progress is not None:
            progress(t, plan.progress_total)
    close_leaves(np.ones(len(counts), dtype=bool))
    return leaf, np.concatenate(leaf_counts)


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


def lsh_coreset(
    X: np.ndarray,
    k: int,
    *,
    radius: float,
    center: np.ndarray | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    n_public: int | None = None,
    relation: str = "add-remove",
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
    bits_per_level: int | None = None,
    sum_weight: int | None = None,
    min_count: int | None = None,
    branch_count: int | None = None,
    restarts: int = KMEANS_RESTARTS,
) -> ClusteringResult:
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
    if min_count is not None:
        min_count = check_integer("min_count", min_count, 1)
    if branch_count is not None:
        branch_count = check_integer("branch_count", branch_count, 1)
    restarts = check_integer("restarts", restarts, 1)
    run = start_run(
        X,
        k,
        radius=radius,
        center=center,
        n_public=n_public,
        relation=relation,
        rng=rng,
        algorithm="lsh-coreset",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        bits_per_level=bits_per_level,
        sum_weight=sum_weight,
    )
    points, c, plan, noise_rng = run.points, run.center, run.plan, run.rng
    del run  # `points` is the one N x d working copy: freed with it below
    radius = float(radius)
    n_cols = points.shape[1]
    bits = DEFAULT_BITS_PER_LEVEL if bits_per_level is None else int(bits_per_level)
    weight = plan.releases - plan.iterations  # the sums' share, as plan_lsh_releases fixed it
    keep_at = default_min_count(plan, weight) if min_count is None else min_count
    branch_at = BRANCH_FACTOR * keep_at if branch_count is None else branch_count

    normals = noise_rng.standard_normal(size=(plan.iterations * bits, n_cols))
    codes = hash_codes(points, normals)
    leaf, weights = grow_tree(
        codes,
        plan,
        bits_per_level=bits,
        min_count=keep_at,
        branch_count=branch_at,
        rng=noise_rng,
        progress=progress,
    )
    del codes
    n_leaves = len(weights)
    # Rows in no leaf go to an extra bucket that is never released.
    labels = np.where(leaf >= 0, leaf, n_leaves)
    sums, _ = cluster_grid_sums(points, labels, n_leaves + 1, radius)
    del points, labels
    noisy_sums = noise.integer_release(
        sums[:n_leaves],
        sensitivity=plan.sum_sensitivity_factor * grid_sensitivity(n_cols) / math.sqrt(weight),
        sigma=plan.sigma,
        rng=noise_rng,
    )
    unit = radius * 2.0**-GRID_BITS
    coreset = noisy_sums.astype(np.float64) * unit / np.maximum(weights, 1)[:, None]
    project_into_ball(coreset, radius)
    centres = weighted_kmeans(
        coreset,
        np.maximum(weights, 1),
        plan.k,
        radius=radius,
        rng=noise_rng,
        packing_rng=rng,
        restarts=restarts,
    )
    project_into_ball(centres, radius)
    if progress is not None:
        progress(plan.progress_total, plan.progress_total)
    return plan.result(centres, c, radius, 0)
