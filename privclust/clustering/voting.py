"""Nearest-candidate search: exact search for labelling and losses, and the PE-means vote's fast
search.

`nearest_candidates` returns, for every row, the lowest index j minimising the directly computed
squared distance sum_l (x_l - c_jl)^2; faster arithmetic (BLAS scores, KD-trees, pruning) finds
that answer with rigorous rounding windows. The vote (`nearest_candidate_votes`) does not need
the globally nearest candidate: privacy needs each row's vote to be a function of that row and
the public candidates (adding or removing a row then changes exactly one bin by one). It searches
a structure built from the candidates (`vote_index`, `vote_labels`) and returns, for every row x,
the ideal vote v*(x): the lowest index minimising the float64 squared distance `_ordered_sq`
over S(x), the members of the cell(s) of x's nearest centre(s) (same distance, lowest index on
ties) plus a global set. Scores are taken in float32 with BLAS, whose rounding may depend on the
other rows of a call (matrix shapes select kernels); a rigorous per-row rounding window
(`_vote_window`) flags every row whose float32 answer could differ from v*(x), and those rows
are re-decided in float64 by elementwise arithmetic that involves no other row. So each vote is
a function of its row alone, whatever BLAS does with the shapes.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree
from threadpoolctl import ThreadpoolController

from privclust.clustering.kernels import ordered_best, search_cells

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


def _group_cores(
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
    cores, far, radii = _group_cores(candidates, layout)
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


# ---------------------------------------------------------------------------------------------
# The vote's search: float32 scores, pruned by the population's structure (not exact).
#
# Privacy needs only that each row's vote is a function of that row and the public candidates
# (sensitivity 1 whatever the function), so the vote may search approximately. The structure is
# built from the candidates alone and the search takes the same steps for every row: score the
# row against the cell centres, then against the members of its `probes` nearest cells and the
# global set, keep the best. Nothing about the rows (their count included) selects the method.

# Scores |c|^2/2 - x.c in float32: half the memory traffic of float64 and twice the BLAS rate.
# Rows whose float32 answer is within rounding of another are re-decided exactly (see
# `_vote_window`), so rounding never changes a vote.
VOTE_DTYPE = np.float32
_U32 = 2.0**-24  # float32 unit roundoff
# Rows whose scaled norm exceeds this (or is NaN) are re-decided in float64: below it no float32
# score (at most |x_s| + 1/2 in size) can overflow, which `_vote_window` assumes.
_F32_SAFE_NORM = 2.0**100
# Rows per block of the vote (bounds the float32 copy of a block and the per-cell score arrays).
VOTE_BLOCK_ROWS = 1 << 15
# Below this many rows per block, splitting a vote between threads costs more than it gains.
VOTE_MIN_BLOCK_ROWS = 1 << 11
# Score-matrix elements per gemm call (rows x candidates, float32: 1 MiB): a score block that
# stays in cache is scored and reduced 4-6x faster than one that streams through memory.
VOTE_SCORE_ELEMENTS = 1 << 18
# Populations without group structure (the first iteration's sphere packing) larger than this
# are searched through an inverted file: cells of about IVF_CELL_SIZE candidates around evenly
# chosen centres, each row searching its IVF_PROBES nearest cells (measured in bench/RESULTS.md,
# "vote search").
IVF_MIN_CANDIDATES = 2048
# An evolved population's far mutants are copied into every anchor cell while the copies
# number at most this many per candidate; beyond, they are one set every row searches.
FAR_COPIES_PER_CANDIDATE = 4
# Anchor cells each row of an evolved population searches (its nearest ones).
GROUP_PROBES = 1
IVF_CELL_SIZE = 256
IVF_PROBES = 8


@dataclass(frozen=True)
class _Cell:
    index: np.ndarray  # global candidate indices, ascending (int32)
    weights: np.ndarray  # len(index) x (d + 1): [-c, |c|^2 / 2] in VOTE_DTYPE


@dataclass(frozen=True)
class VoteIndex:
    """A search structure over public candidates: cells (each row searches the members of its
    `probes` nearest cell centres) plus a global set every row searches."""

    n_candidates: int
    dim: int
    centres: _Cell | None
    cells: tuple[_Cell, ...]
    everyone: _Cell | None
    probes: int
    tree: cKDTree | None = None
    scale: float = 1.0  # rows and candidates are scored in units of the largest candidate norm
    # The candidates in float64 (unscaled): uncertain rows are re-decided on direct distances.
    candidates: np.ndarray | None = None
    # The cells end to end, for the compiled search (`kernels.search_cells`).
    packed: _PackedCells | None = None


@dataclass(frozen=True)
class _PackedCells:
    weights: np.ndarray  # every cell's weights, cell after cell (float32, C order)
    members: np.ndarray  # every cell's candidate indices (int32), in the same order
    offsets: np.ndarray  # cell c is rows offsets[c]..offsets[c + 1] of both (int64)


def _packed_cells(
    candidates: np.ndarray, groups: list[np.ndarray]
) -> tuple[tuple[_Cell, ...], _PackedCells]:
    """One cell per group of candidate indices, their weights computed once end to end: each
    cell is a view of its part of the packed arrays."""
    whole = _cell(candidates, np.concatenate(groups))
    offsets = np.concatenate(([0], np.cumsum([len(group) for group in groups]))).astype(np.int64)
    cells = tuple(
        _Cell(index=whole.index[a:b], weights=whole.weights[a:b])
        for a, b in itertools.pairwise(offsets)
    )
    return cells, _PackedCells(weights=whole.weights, members=whole.index, offsets=offsets)


def _cell(candidates: np.ndarray, index: np.ndarray) -> _Cell:
    chosen = candidates[index]
    weights = np.empty((len(index), candidates.shape[1] + 1), dtype=VOTE_DTYPE)
    weights[:, :-1] = -chosen
    weights[:, -1] = 0.5 * np.einsum("ij,ij->i", chosen, chosen)
    return _Cell(index=np.asarray(index, dtype=np.int32), weights=weights)


def vote_index(candidates: np.ndarray, layout: GroupLayout | None = None) -> VoteIndex:
    """The search structure of a population (public: built from the candidates only).

    - An evolved population (`layout`, at least two anchors): one cell per anchor holding the
      anchor and its core mutants (within CORE_FRACTION of the distance to the nearest other
      anchor); the remaining mutants (heavy-tailed Levy jumps) are searched by every row, so
      they are stored in every cell (each row scores one list), or, when those copies would
      exceed FAR_COPIES_PER_CANDIDATE per candidate (large k), kept as one global set. A row
      searches the cell of its nearest anchor.
    - Any other population of more than IVF_MIN_CANDIDATES: an inverted file over centres spread
      evenly through the candidate list (a sphere packing is in random order), each candidate in
      the cell of its nearest centre; a row searches its IVF_PROBES nearest cells.
    - Any other population in at most TREE_MAX_DIM dimensions: a KD-tree (exact, float64).
    - Otherwise every row searches every candidate.
    """
    candidates = np.asarray(candidates, dtype=np.float64)
    n, d = candidates.shape
    # float32 scores in units of the (public) largest candidate norm: no overflow or underflow
    # whatever the declared radius.
    scale = float(np.sqrt(np.einsum("ij,ij->i", candidates, candidates).max()))
    if not (np.isfinite(scale) and scale > 0.0):
        scale = 1.0
    unit = candidates / scale
    if (layout is None or layout.anchors <= 1) and d <= TREE_MAX_DIM:
        return VoteIndex(
            n_candidates=n,
            dim=d,
            centres=None,
            cells=(),
            everyone=None,
            probes=0,
            tree=cKDTree(candidates, balanced_tree=False),
        )
    grouped = layout is not None and layout.anchors > 1 and layout.per_anchor >= 1
    if grouped:
        assert layout is not None
        k = layout.anchors
        cores, far, _ = _group_cores(candidates, layout)
        # The far mutants go into every cell (one list per row) unless the copies would
        # outgrow the population: at k = 1638 with 1890 far mutants in 64 dimensions, the
        # copies took 0.8 GB and building them 2.6 s per iteration. The set S(x) searched is
        # the same either way.
        shared = len(far) * k > FAR_COPIES_PER_CANDIDATE * n
        groups = cores if shared else [np.sort(np.concatenate((core, far))) for core in cores]
        cells, packed = _packed_cells(unit, groups)
        return VoteIndex(
            n_candidates=n,
            dim=d,
            centres=_cell(unit, np.arange(k)),
            cells=cells,
            everyone=_cell(unit, far) if shared else None,
            probes=min(GROUP_PROBES, k),
            scale=scale,
            candidates=candidates,
            packed=packed,
        )
    if n > IVF_MIN_CANDIDATES:
        n_cells = max(n // IVF_CELL_SIZE, 1)
        centre_index = np.linspace(0, n - 1, n_cells).round().astype(np.intp)
        centre_cell = _cell(unit, centre_index)
        owner = np.empty(n, dtype=np.intp)
        for start in range(0, n, 4096):
            chunk = unit[start : start + 4096]
            scores = chunk @ centre_cell.weights[:, :-1].T.astype(np.float64)
            scores += centre_cell.weights[:, -1].astype(np.float64)
            owner[start : start + 4096] = scores.argmin(axis=1)
        owner[centre_index] = np.arange(n_cells)  # a centre belongs to its own cell
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(n_cells + 1))
        cells, packed = _packed_cells(
            unit, [np.sort(order[bounds[c] : bounds[c + 1]]) for c in range(n_cells)]
        )
        return VoteIndex(
            n_candidates=n,
            dim=d,
            centres=centre_cell,
            cells=cells,
            everyone=None,
            probes=min(IVF_PROBES, n_cells),
            scale=scale,
            candidates=candidates,
            packed=packed,
        )
    return VoteIndex(
        n_candidates=n,
        dim=d,
        centres=None,
        cells=(),
        everyone=_cell(unit, np.arange(n)),
        scale=scale,
        probes=0,
        candidates=candidates,
    )


def _vote_window(scaled_norms: np.ndarray, d: int) -> np.ndarray:
    """Per row, a rigorous bound w (with a factor 2 to spare) on |float32 score - ideal score|
    for every candidate, where the ideal score is sq / (2 scale^2) - |x_s|^2 / 2, sq the
    `_ordered_sq` squared distance and x_s the scaled row (|x_s| computed in float64,
    `scaled_norms`).

    Argument. After scaling, every candidate has |c| <= 1 (up to float64 rounding). A score is the
    dot product of length d + 1 of a = [x_s, 1] with b = [-c, |c|^2 / 2], so
    sum |a_i b_i| <= |x_s| |c| + |c|^2 / 2 <= |x_s| + 1/2 (Cauchy-Schwarz). Rounding the inputs to
    float32: each x_s,i carries a relative error <= 3u (row scaled in float32 or float64, then
    rounded), each c_i and |c|^2 / 2 one <= u (+ float64 terms), u = 2^-24; so the products move
    by <= 4.01 u sum |a_i b_i|. The float32 dot product in any summation order (BLAS blocking,
    kernel choice by matrix shape, FMA, wider accumulators; any conventional gemm, i.e. no
    Strassen-type algorithm) errs by <= gamma_{d+1} sum |a_i b_i|, gamma_n = n u / (1 - n u).
    Total <= 1.01 (d + 6) u (|x_s| + 1/2). The float64 squared distance errs from exact
    arithmetic by <= gamma_{d+2} (|x_s| + 1)^2 in scaled units (its half in score units), and
    underflow adds at most (d + 1) 2^-149. w is twice the sum of these bounds.

    Consequence: if the float32 best and second-best scores over a set differ by more than 2w,
    the float32 argmin is the unique minimiser of `_ordered_sq` over that set.
    """
    float32_part = 1.01 * (d + 6) * _U32 * (scaled_norms + 0.5)
    float64_part = (d + 2) * _EPS * (scaled_norms + 1.0) ** 2 + (d + 1) * 2.0**-149
    return 2.0 * (float32_part + float64_part)


def _ordered_sq(rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """rows x candidates squared distances in float64, each summed over the coordinates in a
    fixed order by elementwise operations: every entry depends on its row and candidate only,
    whatever the shapes (a reduction such as np.sum may pick its summation order by shape)."""
    diff = rows[:, None, 0] - candidates[None, :, 0]
    acc = diff * diff
    for col in range(1, rows.shape[1]):
        diff = rows[:, None, col] - candidates[None, :, col]
        acc += diff * diff
    return acc


def _scores(weights: np.ndarray, rows_t: np.ndarray) -> np.ndarray:
    """The float32 gemm of the vote: candidates x rows scores, from the cell's weights and the
    augmented rows stored one per column. Some OpenBLAS kernels leave the FE_INVALID flag set on
    finite inputs (numpy issue 24067, OpenBLAS issue 1924), which numpy reports as "invalid
    value encountered in matmul": seen once in four CI runs on this machine, on 150 x 5 finite
    rows. The flag is ignored here: scores can only be NaN or infinite for rows whose norm is
    above _F32_SAFE_NORM or NaN, and `_fast_block` sends those to the exact float64 re-decision
    (`_ideal_votes`) whatever their scores."""
    with np.errstate(invalid="ignore"):
        return weights @ rows_t


def _best_in(
    rows_t: np.ndarray,
    cell: _Cell,
    best: np.ndarray,
    second: np.ndarray,
    best_index: np.ndarray,
) -> None:
    """Merge the members of `cell` into (best, second, best_index) of the augmented float32 rows
    `rows_t` (one per column): the best and second-best float32 scores seen so far and the
    index of the best (strict improvement only). `kernels.search_cells` with every row in the
    one cell."""
    n_rows = rows_t.shape[1]
    search_cells(
        rows_t,
        np.arange(n_rows),
        np.array([0, n_rows]),
        cell.weights,
        np.array([0, len(cell.index)]),
        cell.index,
        VOTE_SCORE_ELEMENTS,
        best,
        second,
        best_index,
    )


def _cell_order(cell_of_row: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by cell (ascending within a cell) and where each cell's rows start:
    cell c's rows are order[bounds[c]:bounds[c + 1]]."""
    order = np.argsort(cell_of_row, kind="stable")
    return order, np.searchsorted(cell_of_row[order], np.arange(n_cells + 1))


def _rows_per_cell(nearest: np.ndarray, n_cells: int) -> Iterator[tuple[int, np.ndarray]]:
    """For each probe (column of `nearest`, the cells each row searches) and each cell some row
    probes there: (the cell, those rows in ascending order)."""
    for probe in range(nearest.shape[1]):
        order, bounds = _cell_order(nearest[:, probe], n_cells)
        for c in range(n_cells):
            if bounds[c + 1] > bounds[c]:
                yield c, order[bounds[c] : bounds[c + 1]]


def _fast_block(block: np.ndarray, index: VoteIndex) -> tuple[np.ndarray, np.ndarray]:
    """float32 search of a block (not the KD-tree path): the fast vote per row and a mask of the
    rows it may get wrong (cell choice or member choice within 2 `_vote_window`s of a tie). On
    the unmasked rows the fast vote equals the ideal vote v*(x) (see the module docstring)."""
    n, d = len(block), index.dim
    # Augmented rows [x / scale, 1], one per column: each cell's gemm is then candidates x rows,
    # and the running best of a row is updated along contiguous memory (`merge_top2`).
    rows_t = np.empty((d + 1, n), dtype=VOTE_DTYPE)
    with np.errstate(over="ignore"):  # rows beyond float32 are flagged below (_F32_SAFE_NORM)
        np.multiply(block.T, 1.0 / index.scale, out=rows_t[:-1], casting="unsafe")
    rows_t[-1] = 1.0
    scaled = np.asarray(block, dtype=np.float64) / index.scale
    norms = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    window = _vote_window(norms, d)
    best = np.full(n, np.inf, dtype=VOTE_DTYPE)
    second = np.full(n, np.inf, dtype=VOTE_DTYPE)
    best_index = np.zeros(n, dtype=np.int32)
    uncertain = ~(norms <= _F32_SAFE_NORM)
    if index.everyone is not None:
        _best_in(rows_t, index.everyone, best, second, best_index)
    if index.centres is not None:
        probes, n_centres = index.probes, len(index.centres.index)
        if probes == 1 < n_centres:
            # The nearest centre and the gap to the next: the chosen cell is the exact one
            # unless they differ by <= 2w (NaN or inf gaps count as uncertain).
            centre_best = np.full(n, np.inf, dtype=VOTE_DTYPE)
            centre_next = np.full(n, np.inf, dtype=VOTE_DTYPE)
            nearest_centre = np.zeros(n, dtype=np.int32)
            _best_in(rows_t, index.centres, centre_best, centre_next, nearest_centre)
            with np.errstate(invalid="ignore"):  # inf - inf: uncertain
                uncertain |= ~(centre_next.astype(np.float64) - centre_best > 2.0 * window)
            nearest: np.ndarray = nearest_centre[:, None]
        elif probes < n_centres:
            # Columns 0..probes-1: the probes best centres; column probes: the next one, with
            # the same rule at the probes-th.
            centre_scores = _scores(index.centres.weights, rows_t).T
            part = np.argpartition(centre_scores, [probes - 1, probes], axis=1)
            edge = np.take_along_axis(centre_scores, part[:, probes - 1 : probes + 1], axis=1)
            with np.errstate(invalid="ignore"):  # inf - inf: uncertain
                gap = edge[:, 1].astype(np.float64) - edge[:, 0]
            uncertain |= ~(gap > 2.0 * window)
            nearest = part[:, :probes]
        else:
            nearest = np.broadcast_to(np.arange(n_centres), (n, n_centres))
        packed = index.packed
        assert packed is not None
        for probe in range(nearest.shape[1]):
            # One compiled call per probe for every cell; a row probing several cells keeps
            # one running best across them.
            order, bounds = _cell_order(nearest[:, probe], len(index.cells))
            search_cells(
                rows_t,
                order,
                bounds,
                packed.weights,
                packed.offsets,
                packed.members,
                VOTE_SCORE_ELEMENTS,
                best,
                second,
                best_index,
            )
    with np.errstate(invalid="ignore"):  # inf - inf: uncertain
        gap = second.astype(np.float64) - best
    uncertain |= ~(gap > 2.0 * window)
    return best_index.astype(np.intp), uncertain


def _ideal_in(
    rows: np.ndarray,
    candidates: np.ndarray,
    members: np.ndarray,
    best: np.ndarray,
    best_index: np.ndarray,
    sub: np.ndarray,
) -> None:
    """Merge `members` (global indices) into (best, best_index) of rows `sub`: smaller
    `_ordered_sq`, or equal and lower index, wins. Compiled (`kernels.ordered_best`): each
    distance is summed coordinate by coordinate with the same rounded operations as
    `_ordered_sq`, so the answer is the same bit for bit, per row, without the GIL."""
    members_t = np.ascontiguousarray(candidates[members].T)
    part = np.ascontiguousarray(rows[sub], dtype=np.float64)
    part_best, part_index = best[sub], best_index[sub]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        ordered_best(part, members_t, np.asarray(members, dtype=np.int64), part_best, part_index)
    best[sub], best_index[sub] = part_best, part_index


def _ideal_votes(rows: np.ndarray, index: VoteIndex) -> np.ndarray:
    """v*(x) of every row (float64): the `probes` nearest centres by `_ordered_sq` (lowest index
    on ties, stable sort per row), then the lowest-index minimiser of `_ordered_sq` over their
    cells' members and the global set. Each row's answer is computed from that row and the
    candidates alone (elementwise arithmetic and per-row reductions), so batching is safe."""
    assert index.candidates is not None
    candidates = index.candidates
    n = len(rows)
    best = np.full(n, np.inf)
    best_index = np.full(n, len(candidates), dtype=np.intp)
    everything = np.arange(n)
    if index.everyone is not None:
        _ideal_in(rows, candidates, index.everyone.index, best, best_index, everything)
    if index.centres is not None:
        centre_points = candidates[index.centres.index]
        nearest = np.empty((n, index.probes), dtype=np.intp)
        step = max(1, VOTE_SCORE_ELEMENTS // len(centre_points))
        for start in range(0, n, step):
            sq = _ordered_sq(rows[start : start + step], centre_points)
            nearest[start : start + step] = np.argsort(sq, axis=1, kind="stable")[:, : index.probes]
        for c, sub in _rows_per_cell(nearest, len(index.cells)):
            _ideal_in(rows, candidates, index.cells[c].index, best, best_index, sub)
    return best_index


def _search_block(block: np.ndarray, index: VoteIndex) -> np.ndarray:
    if index.tree is not None:
        # cKDTree answers each query on its own in float64: already a function of the row
        # alone (no other row enters its arithmetic).
        _, nearest_index = index.tree.query(np.asarray(block, dtype=np.float64), k=1)
        return np.asarray(nearest_index, dtype=np.intp)
    labels, uncertain = _fast_block(block, index)
    rows = np.flatnonzero(uncertain)
    if rows.size:
        labels[rows] = _ideal_votes(np.asarray(block[rows], dtype=np.float64), index)
    return labels


def _vote_block_rows(n: int, workers: int) -> int:
    """Rows per block: at most VOTE_BLOCK_ROWS, and a whole number of blocks per worker so the
    threads finish together (20,000 rows on 2 cores: 2 blocks of 10,000, not one of 20,000).
    Blocks never change a vote (each is a function of its row alone), only the time."""
    blocks = -(-n // VOTE_BLOCK_ROWS)
    blocks = -(-blocks // workers) * workers
    size = -(-n // max(blocks, 1))
    return max(size, min(n, VOTE_MIN_BLOCK_ROWS), 1)


@functools.cache
def _thread_controller() -> ThreadpoolController:
    # Scanning the loaded libraries takes milliseconds; numpy's BLAS is loaded by now, so one
    # scan per process serves every vote.
    return ThreadpoolController()


def one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """Limit BLAS to one thread for the block: the vote runs its own threads, and every other
    product of a PE-means iteration is small. Limit whole loops, not single calls: after a
    multi-threaded call OpenBLAS's idle threads keep spinning for a while (about 2^28 cycles,
    OPENBLAS_THREAD_TIMEOUT), and on two cores that took one core from the vote's threads
    (sklearn_4_16: a job 212 ms with BLAS threads between the votes, 175 ms without;
    bench/RESULTS.md, "Speed: one BLAS thread per job")."""
    return _thread_controller().limit(limits=1, user_api="blas")


def vote_labels(points: np.ndarray, index: VoteIndex) -> np.ndarray:
    """The candidate each row votes for: its ideal vote v*(x) under `index` (module docstring).

    With cells: the lowest index minimising the float64 squared distance `_ordered_sq` among the
    members of the cell(s) of the row's `probes` nearest centres (same distance, lowest index
    on ties) and the global set; without: among all candidates (or the KD-tree's nearest,
    computed per query in float64). Approximately the nearest candidate, exactly one label per
    row, and a function of the row and the candidates alone: the float32 answer is used only
    where a rigorous rounding window proves it equals v*(x); the other rows are re-decided in
    float64 by arithmetic that involves no other row. Blocks of rows are searched by worker_count()
    threads, each with one BLAS thread (numpy releases the GIL in the heavy calls).
    """
    out = np.empty(len(points), dtype=np.intp)
    size = _vote_block_rows(len(points), worker_count())
    starts = range(0, len(points), size)

    def search(start: int) -> None:
        out[start : start + size] = _search_block(points[start : start + size], index)

    threads = min(worker_count(), len(starts))
    # Each gemm is small (a cache-sized score block): BLAS threads would only add overhead.
    with one_blas_thread():
        if threads <= 1:
            for start in starts:
                search(start)
        else:
            with ThreadPoolExecutor(threads) as pool:
                for _ in pool.map(search, starts):
                    pass
    return out


def nearest_candidate_votes(
    points: np.ndarray, candidates: np.ndarray, layout: GroupLayout | None = None
) -> np.ndarray:
    """Vote histogram (int64): how many rows vote for each candidate (`vote_labels`: about the
    nearest, searched through `vote_index(candidates, layout)`).

    Each row casts exactly one vote, which depends only on that row and the public candidates:
    adding or removing a row changes one bin by one (l2 sensitivity 1; sqrt(2) when a row is
    replaced)."""
    labels = vote_labels(points, vote_index(candidates, layout))
    return np.bincount(labels, minlength=len(candidates)).astype(np.int64)
