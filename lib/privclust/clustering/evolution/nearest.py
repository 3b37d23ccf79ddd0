"""Exact nearest-candidate search, for labelling rows and for losses: every row's nearest
candidate, and the distances between a set of points.

`nearest_candidates` returns, for every row, the lowest index j minimising the directly computed
squared distance sum_l (x_l - c_jl)^2; faster arithmetic (BLAS scores, KD-trees, pruning) finds
that answer with rigorous rounding windows. (The PE-means vote searches differently:
privclust.clustering.evolution.vote.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

# Backend choice by dimension (measured in bench/RESULTS.md, "nearest-candidate backend"): a
# KD-tree beats chunked BLAS on an unstructured (sphere-packed) population up to d = 6, the two
# cross near d = 8; on an evolved population the grouped search is as fast as the tree at d = 4
# and faster from d = 5 on.
TREE_MAX_DIM = 6
GROUPED_MIN_DIM = 5
# Rows per KD-tree query call: bounds the temporary distance/index arrays for very large N.
TREE_CHUNK_ROWS = 1 << 16
# Target size in bytes of one rows x candidates block of BLAS scores.
BLAS_BLOCK_BYTES = 1 << 21
# A group's "core" holds the mutants within this fraction of the distance from its anchor to
# the nearest other anchor; the rest are heavy-tailed Levy jumps searched for every row
# (see the grouped search below; measured in bench/RESULTS.md, "nearest-candidate backend").
CORE_FRACTION = 0.25
# Rows per block of the grouped search (bounds its rows x anchors temporaries).
GROUPED_CHUNK_ROWS = 1 << 15
_EPS = float(np.finfo(np.float64).eps)


def worker_count() -> int:
    """CPU threads to use: the affinity mask, capped by OMP_NUM_THREADS when a worker sets it."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        available = os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "")
    if limit.isdigit() and int(limit) > 0:
        available = min(available, int(limit))
    return max(available, 1)


def _rounding_window(d: int, norms: np.ndarray, cand_norm: float) -> np.ndarray:
    # Rigorous (generous) bound, per row, on |BLAS score - exact score| + |direct sq / 2 -
    # exact|, doubled: a candidate that can be the direct-distance minimiser scores within it of
    # the best BLAS score; squared distances computed any other way are within twice it.
    return 8.0 * (d + 4) * _EPS * (norms + cand_norm) ** 2


def _direct_sq(row: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    diff = candidates - row
    return np.sum(diff * diff, axis=1)


def _lowest_direct_argmin(row: np.ndarray, candidates: np.ndarray, index: np.ndarray) -> int:
    """Lowest index in `index` (ascending) minimising the direct squared distance to `row`."""
    return int(index[np.argmin(_direct_sq(row, candidates[index]))])


def _blas_best(
    points: np.ndarray, candidates: np.ndarray, subset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest candidate (global index) per row among `subset` (ascending indices; None = all),
    and its BLAS score |c|^2 / 2 - x . c (exact to within `_rounding_window` / 2).

    Scores come from one gemm per row block ([x, 1] against [-c, |c|^2/2]). Rows whose
    second-best score lies within the rounding window of the best are re-decided on direct
    distances among every candidate within that window.
    """
    index = np.arange(len(candidates)) if subset is None else subset
    chosen = candidates[index]
    n_cand, d = chosen.shape
    weights = np.empty((d + 1, n_cand))
    weights[:d] = -chosen.T
    weights[d] = 0.5 * np.einsum("ij,ij->i", chosen, chosen)
    cand_norm = float(np.sqrt(2.0 * weights[d].max()))
    out = np.empty(len(points), dtype=np.intp)
    out_scores = np.empty(len(points))
    rows = int(np.clip(BLAS_BLOCK_BYTES // (8 * n_cand), 16, 8192))
    augmented = np.empty((min(rows, len(points)), d + 1))
    augmented[:, d] = 1.0
    for start in range(0, len(points), rows):
        block = augmented[: min(rows, len(points) - start)]
        block[:, :d] = points[start : start + rows]
        scores = block @ weights
        positions = np.arange(len(block))
        best = scores.argmin(axis=1)
        lowest = scores[positions, best]
        out_scores[start : start + len(block)] = lowest
        if n_cand > 1:
            norms = np.sqrt(np.einsum("ij,ij->i", block, block) - 1.0)
            threshold = lowest + _rounding_window(d, norms, cand_norm)
            scores[positions, best] = np.inf
            for r in np.flatnonzero(scores.min(axis=1) <= threshold):
                scores[r, best[r]] = -np.inf
                best[r] = _lowest_direct_argmin(
                    block[r, :d], chosen, np.flatnonzero(scores[r] <= threshold[r])
                )
        out[start : start + len(block)] = index[best]
    return out, out_scores


def _blas_search(
    points: np.ndarray, candidates: np.ndarray, subset: np.ndarray | None = None
) -> np.ndarray:
    """Nearest candidate (global index) per row among `subset` (None = all), by BLAS."""
    return _blas_best(points, candidates, subset)[0]


def _tree_search(points: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Nearest candidate per row from a KD-tree over the candidates (two nearest per query, so
    rows whose two best distances are within the rounding window are re-decided directly)."""
    out = np.empty(len(points), dtype=np.intp)
    if len(candidates) == 1:
        out[:] = 0
        return out
    # Sliding-midpoint splits (balanced_tree=False) build faster and, on the tight clumps of
    # mutants PE-means produces, query about twice as fast as median splits (measured).
    tree = cKDTree(candidates, balanced_tree=False)
    workers = worker_count()
    cand_norm = float(np.sqrt(np.einsum("ij,ij->i", candidates, candidates).max()))
    d = candidates.shape[1]
    everything = np.arange(len(candidates))
    for start in range(0, len(points), TREE_CHUNK_ROWS):
        block = np.asarray(points[start : start + TREE_CHUNK_ROWS], dtype=np.float64)
        dist, idx = tree.query(block, k=2, workers=workers)
        window = 2.0 * _rounding_window(d, np.sqrt(np.einsum("ij,ij->i", block, block)), cand_norm)
        best = idx[:, 0]
        for r in np.flatnonzero(dist[:, 1] ** 2 - dist[:, 0] ** 2 <= window):
            best[r] = _lowest_direct_argmin(block[r], candidates, everything)
        out[start : start + len(block)] = best
    return out


def _full_search(points: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    if candidates.shape[1] <= TREE_MAX_DIM:
        return _tree_search(points, candidates)
    return _blas_search(points, candidates)


@dataclass(frozen=True)
class GroupLayout:
    """Population layout of PE-means after the first iteration: rows 0..k-1 are the selected
    centres ("anchors"); rows k + g*per_anchor ... k + (g+1)*per_anchor - 1 mutate anchor g."""

    anchors: int
    per_anchor: int


# Elements (pairs x coordinates) per block of `nearest_other_distances`: 32 MiB of float64.
PAIR_BLOCK_ELEMENTS = 1 << 22


def nearest_other_distances(points: np.ndarray) -> np.ndarray:
    """For every point, the distance to the nearest other point (inf when there is none), from
    blocks of pairwise differences: O(block) memory, not points^2 x d (k = 4096 centres in 64
    dimensions would take 8.6 GB at once). Each distance is the same float whatever the block:
    the sum over coordinates runs along one contiguous row of differences."""
    n, d = points.shape
    out = np.empty(n)
    rows = max(1, PAIR_BLOCK_ELEMENTS // max(n * d, 1))
    for start in range(0, n, rows):
        sq = np.sum((points[start : start + rows, None, :] - points[None, :, :]) ** 2, axis=2)
        sq[np.arange(len(sq)), start + np.arange(len(sq))] = np.inf
        out[start : start + rows] = np.sqrt(sq.min(axis=1))
    return out


def group_cores(
    candidates: np.ndarray, layout: GroupLayout
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """An evolved population's groups (built from the candidates alone): per anchor g, its core
    (g and its mutants within CORE_FRACTION of the distance to the nearest other anchor, global
    indices ascending); the far mutants (all others, ascending); and each core's radius r_g,
    its largest mutant offset (0 for an anchor alone)."""
    k, per = layout.anchors, layout.per_anchor
    anchors = candidates[:k]
    mutants = candidates[k:].reshape(k, per, candidates.shape[1])
    offsets = np.sqrt(np.sum((mutants - anchors[:, None, :]) ** 2, axis=2))
    in_core = offsets <= CORE_FRACTION * nearest_other_distances(anchors)[:, None]
    radii = np.where(in_core, offsets, 0.0).max(axis=1)
    mutant_index = (k + np.arange(k * per)).reshape(k, per)
    far = np.sort(mutant_index[~in_core])
    cores = [np.concatenate(([g], mutant_index[g][in_core[g]])) for g in range(k)]
    return cores, far, radii


def _grouped_search(points: np.ndarray, candidates: np.ndarray, layout: GroupLayout) -> np.ndarray:
    """Exact nearest candidate exploiting that mutants cluster around their anchor.

    Group g's core is its anchor and the mutants within CORE_FRACTION of the distance to the
    nearest other anchor (radius r_g: the largest such offset); the other mutants are "far"
    (the heavy-tailed Levy jumps) and searched for every row. A row is searched among the core of
    its nearest anchor and the far set, giving a best distance b. Every member of another
    group's core is at least |x - a_h| - r_h away, so when that bound exceeds b (with rounding
    margins) for every other group the answer is final; otherwise the row falls back to a search
    over all candidates.
    """
    anchors = candidates[: layout.anchors]
    cores, far, radii = group_cores(candidates, layout)
    cand_norm = float(np.sqrt(np.einsum("ij,ij->i", candidates, candidates).max()))
    out = np.empty(len(points), dtype=np.intp)
    for start in range(0, len(points), GROUPED_CHUNK_ROWS):
        block = np.asarray(points[start : start + GROUPED_CHUNK_ROWS], dtype=np.float64)
        out[start : start + len(block)] = _grouped_block(
            block, candidates, anchors, radii, cores, far, cand_norm
        )
    return out


def _grouped_block(
    block: np.ndarray,
    candidates: np.ndarray,
    anchors: np.ndarray,
    radii: np.ndarray,
    cores: list[np.ndarray],
    far: np.ndarray,
    cand_norm: float,
) -> np.ndarray:
    n, d = block.shape
    k = len(anchors)
    out = np.empty(n, dtype=np.intp)
    score = np.empty(n)
    # Squared distances to the anchors from BLAS; their rounding is covered by `err` below.
    point_sq = np.einsum("ij,ij->i", block, block)
    dist_sq = block @ (-2.0 * anchors.T)
    dist_sq += point_sq[:, None]
    dist_sq += np.einsum("ij,ij->i", anchors, anchors)[None, :]
    nearest_anchor = dist_sq.argmin(axis=1)
    order = np.argsort(nearest_anchor, kind="stable")
    bounds = np.searchsorted(nearest_anchor[order], np.arange(k + 1))
    for g in range(k):
        rows = order[bounds[g] : bounds[g + 1]]
        if rows.size:
            out[rows], score[rows] = _blas_best(block[rows], candidates, cores[g])
    window = _rounding_window(d, np.sqrt(point_sq), cand_norm)
    if far.size:
        far_best, far_score = _blas_best(block, candidates, far)
        take_far = far_score < score - window
        out[take_far] = far_best[take_far]
        # Core and far bests within rounding of each other: decide on direct distances.
        everything = np.arange(len(candidates))
        for r in np.flatnonzero(np.abs(far_score - score) <= window):
            out[r] = _lowest_direct_argmin(block[r], candidates, everything)

    # Verify every row: could a core member of another group be at least as close?
    diff = block - candidates[out]
    best = np.sqrt(np.sum(diff * diff, axis=1))
    err = 16.0 * (d + 4) * _EPS * (np.sqrt(point_sq) + cand_norm) ** 2
    dist_sq -= err[:, None]
    np.maximum(dist_sq, 0.0, out=dist_sq)
    lower = np.sqrt(dist_sq, out=dist_sq)
    lower -= radii[None, :] * (1.0 + 1e-12)
    lower[np.arange(n), nearest_anchor] = np.inf
    slack = best * (1.0 + 1e-9) + np.sqrt(err)
    unsafe = np.flatnonzero((lower <= slack[:, None]).any(axis=1))
    if unsafe.size:
        out[unsafe] = _full_search(block[unsafe], candidates)
    return out


def nearest_candidates(
    points: np.ndarray, candidates: np.ndarray, layout: GroupLayout | None = None
) -> np.ndarray:
    """Index of the nearest candidate (Euclidean; lowest index on exact ties) for every row.

    With a `layout` (PE-means populations after the first iteration) the pruned grouped search
    from GROUPED_MIN_DIM dimensions on; otherwise a KD-tree up to TREE_MAX_DIM dimensions and
    chunked BLAS above. Memory is O(block), never N x candidates.
    """
    if len(points) == 0:
        return np.empty(0, dtype=np.intp)
    d = candidates.shape[1]
    grouped = layout is not None and layout.anchors > 1 and layout.per_anchor >= 1
    if grouped and d >= GROUPED_MIN_DIM:
        assert layout is not None
        return _grouped_search(points, candidates, layout)
    if d <= TREE_MAX_DIM:
        return _tree_search(points, candidates)
    return _blas_search(points, candidates)
