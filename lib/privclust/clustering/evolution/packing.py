"""Sphere-packing initial population (Su et al., adapted to an l2 ball): the PE-means RANDOM_API,
and the initial centres of FastLloyd and the LSH coreset's padding.

It never looks at private data, so it costs no privacy budget, and one packing per shape may
serve every job of a process.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import sparse
from scipy.spatial import cKDTree

MAX_CONSECUTIVE_REJECTIONS = 100
TREE_MAX_DIM = 8
# Packings up to this many coordinates (16 MiB) are cached per shape; bigger ones are rare
# (high-dimensional PE-means) and would pin too much memory in a long-running worker.
PACKING_CACHE_MAX_VALUES = 1 << 21
# Cached packings are made for populations rounded up to a multiple of this and cut to size: the
# population follows the noisy row count, so an exact-size cache would rarely be hit.
PACKING_CACHE_STEP = 512


def uniform_in_ball(rng: np.random.Generator, n: int, d: int, radius: float) -> np.ndarray:
    """n points drawn uniformly from the d-dimensional ball of the given radius around 0."""
    points = rng.standard_normal(size=(n, d))
    norms = np.sqrt(np.einsum("ij,ij->i", points, points))
    # A standard normal vector of norm exactly 0 has probability 0; the floor only avoids 0/0.
    np.maximum(norms, 1e-300, out=norms)
    scale = radius * rng.random(n) ** (1.0 / d) / norms
    points *= scale[:, None]
    return points


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = a @ b.T
    sq *= -2.0
    sq += np.einsum("ij,ij->i", a, a)[:, None]
    sq += np.einsum("ij,ij->i", b, b)[None, :]
    return sq


def _first_failure(accepted: np.ndarray, carried_run: int, limit: int) -> tuple[int | None, int]:
    """Index in this batch where the `limit`-th consecutive rejection happens (None if never),
    and the run of rejections at the end of the batch."""
    positions = np.flatnonzero(accepted)
    # Virtual acceptances before the batch (accounting for the rejections carried in) and after it.
    bounds = np.concatenate(([-1 - carried_run], positions, [accepted.size + limit]))
    gaps = np.diff(bounds) - 1
    failing = np.flatnonzero(gaps >= limit)
    failure = int(bounds[failing[0]] + limit) if failing.size else None
    if failure is not None and failure >= accepted.size:
        failure = None
    tail_run = accepted.size - 1 - int(bounds[-2])
    return failure, tail_run


def _greedy_in_order(points: np.ndarray, min_dist: float, use_tree: bool) -> np.ndarray:
    """Flags of the points kept when they are taken in order and each must be at least
    `min_dist` from every point kept before it."""
    m = len(points)
    keep = np.ones(m, dtype=bool)
    if m < 2:
        return keep
    if use_tree:
        pairs = cKDTree(points).query_pairs(min_dist, output_type="ndarray")
        if pairs.size == 0:
            return keep
        # query_pairs includes pairs at distance exactly min_dist, which the rule allows.
        diffs = points[pairs[:, 0]] - points[pairs[:, 1]]
        pairs = pairs[np.einsum("ij,ij->i", diffs, diffs) < min_dist**2]
        pairs.sort(axis=1)
        first, second = pairs[:, 0], pairs[:, 1]
    else:
        close = _squared_distances(points, points) < min_dist**2
        first, second = np.nonzero(np.triu(close, 1))
    if first.size == 0:
        return keep
    later = sparse.csr_matrix((np.ones(first.size, dtype=bool), (first, second)), shape=(m, m))
    indptr, indices = later.indptr, later.indices
    for i in np.unique(first):
        if keep[i]:
            keep[indices[indptr[i] : indptr[i + 1]]] = False
    return keep


def _attempt(
    n: int, d: int, radius: float, a: float, rng: np.random.Generator, limit: int
) -> np.ndarray | None:
    """One pass at proximity a: the n points, or None after `limit` consecutive rejections.

    Equivalent to drawing one point at a time and accepting it when it is at least 2a from every
    point accepted before it; the draws are made in batches and the sequential rule is replayed on
    each batch, so the result is the same as the one-at-a-time process on the same draws.
    """
    min_dist = 2.0 * a
    accepted = np.empty((n, d))
    count = 0
    indexed = 0  # accepted[:indexed] is in `tree`; the rest is checked by brute force
    tree: cKDTree | None = None
    # KD-trees prune well only in low dimension; above it brute-force BLAS distances are faster.
    use_tree = d <= TREE_MAX_DIM
    run = 0
    batch = 64
    while count < n:
        draws = uniform_in_ball(rng, batch, d, radius - a)
        ok = np.ones(batch, dtype=bool)
        if use_tree and tree is not None:
            dist, _ = tree.query(draws, k=1, distance_upper_bound=min_dist)
            ok &= dist >= min_dist
        if count > indexed:
            recent = accepted[indexed:count]
            scaled = -2.0 * recent
            recent_sq = np.einsum("ij,ij->i", recent, recent)
            draws_sq = np.einsum("ij,ij->i", draws, draws)
            for start in range(0, batch, 1024):
                stop = start + 1024
                # |x - y|^2 = |x|^2 + (|y|^2 - 2 x.y): one gemm, one add and one min per block.
                block = draws[start:stop] @ scaled.T
                block += recent_sq
                ok[start:stop] &= block.min(axis=1) + draws_sq[start:stop] >= min_dist**2
        survivors = np.flatnonzero(ok)
        take = np.zeros(batch, dtype=bool)
        take[survivors[_greedy_in_order(draws[survivors], min_dist, use_tree)]] = True
        failure, run = _first_failure(take, run, limit)
        taken = np.flatnonzero(take)
        needed = n - count
        if taken.size >= needed and (failure is None or taken[needed - 1] < failure):
            accepted[count:] = draws[taken[:needed]]
            return accepted
        if failure is not None:
            return None
        accepted[count : count + taken.size] = draws[taken]
        count += taken.size
        # Size the next batch for the remaining points at the observed acceptance rate; small
        # batches while that rate is unknown keep the within-batch conflict check cheap.
        rate = max(taken.size / batch, 1e-3)
        batch = int(np.clip((n - count) / rate, 64, 1024))
        if use_tree and count - indexed > max(256, indexed // 4):
            tree = cKDTree(accepted[:count])
            indexed = count
    return accepted


def sphere_packing(
    n: int,
    d: int,
    radius: float,
    rng: np.random.Generator,
    *,
    max_rejections: int = MAX_CONSECUTIVE_REJECTIONS,
) -> np.ndarray:
    """n spread-out points in the ball of `radius` around 0 (see pack_ball)."""
    return pack_ball(n, d, radius, rng, max_rejections=max_rejections)[0]


def pack_ball(
    n: int,
    d: int,
    radius: float,
    rng: np.random.Generator,
    *,
    max_rejections: int = MAX_CONSECUTIVE_REJECTIONS,
) -> tuple[np.ndarray, float]:
    """n points in the ball of `radius` around 0, spread out by Su et al.'s packing rule.

    Start with proximity a = R/2; draw points uniformly in the ball of radius R - a and accept
    one when it is at least 2a from every accepted point; after `max_rejections` consecutive
    rejections halve a and start over. Returns the n x d points and the final a: every point
    has norm <= R - a and every pair is at least 2a apart.
    """
    if n < 1 or d < 1:
        raise ValueError("sphere_packing needs n >= 1 and d >= 1")
    a = radius / 2.0
    while True:
        points = _attempt(n, d, radius, a, rng, max_rejections)
        if points is not None:
            return points, a
        a /= 2.0


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
