"""Selection step of PE-means: weighted k-means over the candidates the noisy votes kept."""

from __future__ import annotations

import math

import numpy as np

# k-means++ restarts of the selection step: 5 is as good as 10 on the paper's sets (and better
# than 1 or 3 at k = 64) at half the cost of 10 (bench/RESULTS.md, "selection restarts").
KMEANS_RESTARTS = 5
# Lloyd iterations per restart at most, and the stopping tolerance on the total squared centre
# shift relative to the mean per-column variance of the points (scikit-learn's defaults).
LLOYD_MAX_ITER = 300
LLOYD_TOL = 1e-4


def _squared_distances(points: np.ndarray, sq_norms: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """|x - c|^2 for every restart, point and centre: (R, n, m) from centres (R, m, d)."""
    out = np.matmul(centres, points.T).transpose(0, 2, 1)  # (R, n, m)
    out *= -2.0
    out += sq_norms[None, :, None]
    out += np.einsum("rmd,rmd->rm", centres, centres)[:, None, :]
    np.maximum(out, 0.0, out=out)
    return out


def _kmeans_plus_plus(
    points: np.ndarray,
    sq_norms: np.ndarray,
    weights: np.ndarray,
    k: int,
    restarts: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Greedy weighted k-means++ seeding (2 + log k trials per centre, as in scikit-learn) for
    `restarts` independent runs at once: (R, k, d)."""
    n, d = points.shape
    trials = 2 + int(math.log(k))
    centres = np.empty((restarts, k, d))
    first = rng.choice(n, size=restarts, p=weights / weights.sum())
    centres[:, 0] = points[first]
    closest = _squared_distances(points, sq_norms, centres[:, :1])[:, :, 0]  # (R, n)
    rows = np.arange(restarts)
    for c in range(1, k):
        mass = np.cumsum(closest * weights, axis=1)  # (R, n)
        draws = rng.random((restarts, trials)) * mass[:, -1:]
        picks = np.stack([np.searchsorted(mass[r], draws[r]) for r in range(restarts)])
        np.minimum(picks, n - 1, out=picks)
        trial_dist = _squared_distances(points, sq_norms, points[picks])  # (R, n, trials)
        np.minimum(trial_dist, closest[:, :, None], out=trial_dist)
        potential = np.einsum("rnt,n->rt", trial_dist, weights)
        best = potential.argmin(axis=1)
        closest = trial_dist[rows, :, best]
        centres[:, c] = points[picks[rows, best]]
    return centres


def weighted_kmeans(
    points: np.ndarray, weights: np.ndarray, k: int, restarts: int, rng: np.random.Generator
) -> np.ndarray:
    """Weighted k-means (Lloyd from greedy k-means++ seeds, the best of `restarts` runs by
    weighted inertia): k x d centres. The runs are computed together as (R, ...) arrays: the
    selection step clusters only hundreds of candidates, where per-call overhead, not
    arithmetic, is the cost of a general-purpose implementation. A centre that loses all its
    points keeps its place."""
    points = np.asarray(points, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    n = len(points)
    sq_norms = np.einsum("ij,ij->i", points, points)
    centres = _kmeans_plus_plus(points, sq_norms, weights, k, restarts, rng)
    tol = LLOYD_TOL * float(np.mean(np.var(points, axis=0)))
    weighted_points = points * weights[:, None]
    runs = np.arange(restarts)[:, None]
    columns = np.arange(n)[None, :]
    labels = np.full((restarts, n), -1)
    for _ in range(LLOYD_MAX_ITER):
        new_labels = _squared_distances(points, sq_norms, centres).argmin(axis=2)
        members = np.zeros((restarts, k, n))
        members[runs, new_labels, columns] = 1.0
        mass = members @ weights  # (R, k)
        sums = members @ weighted_points  # (R, k, d)
        filled = mass > 0
        updated = centres.copy()
        updated[filled] = sums[filled] / mass[filled][:, None]
        shift = float(np.sum((updated - centres) ** 2, axis=(1, 2)).max())
        centres = updated
        if np.array_equal(new_labels, labels) or shift <= tol:
            break
        labels = new_labels
    inertia = np.einsum(
        "rn,n->r", _squared_distances(points, sq_norms, centres).min(axis=2), weights
    )
    return centres[int(np.argmin(inertia))].copy()


def select_centres(
    candidates: np.ndarray,
    weights: np.ndarray,
    k: int,
    previous: np.ndarray | None,
    rng: np.random.Generator,
    *,
    restarts: int | None = None,
) -> np.ndarray:
    """k centres: weighted k-means (k-means++ init, `restarts` runs, default KMEANS_RESTARTS) on
    the positive-weight candidates.

    With fewer than k positive-weight candidates there is nothing to cluster; the previous
    selection is kept, or in the first iteration the positive candidates are completed with
    randomly chosen other candidates. The weights are noisy, so this is post-processing.
    """
    positive = np.flatnonzero(weights > 0)
    if positive.size < k:
        if previous is not None:
            return previous
        others = np.setdiff1d(np.arange(len(candidates)), positive)
        fill = rng.choice(others, size=k - positive.size, replace=False)
        return candidates[np.concatenate([positive, fill])].copy()
    if positive.size == k:
        return candidates[positive].copy()
    return weighted_kmeans(
        candidates[positive],
        weights[positive],
        k,
        KMEANS_RESTARTS if restarts is None else restarts,
        rng,
    )
