"""The structure the PE-means vote searches: cells of public candidates, built from the
candidates alone (privclust.clustering.evolution.vote scores each row against it).

Privacy needs only that each row's vote is a function of that row and the public candidates
(sensitivity 1 whatever the function), so the vote may search approximately. The structure is
built from the candidates alone and the search takes the same steps for every row: score the
row against the cell centres, then against the members of its `probes` nearest cells and the
global set, keep the best. Nothing about the rows (their count included) selects the method.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from privclust.clustering.evolution.nearest import TREE_MAX_DIM, GroupLayout, group_cores

# Scores |c|^2/2 - x.c in float32: half the memory traffic of float64 and twice the BLAS rate.
# Rows whose float32 answer is within rounding of another are re-decided exactly (see
# `vote._vote_window`), so rounding never changes a vote.
VOTE_DTYPE = np.float32
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
# Candidates per block when assigning each one to its inverted-file cell.
_OWNER_BLOCK_ROWS = 4096


@dataclass(frozen=True)
class Cell:
    """Candidates scored together: their global indices and their score weights."""

    # global candidate indices (int32): ascending, or in an anchor cell its core ascending,
    # then the far mutants by distance from the anchor (the set is what the vote searches;
    # the order only saves work, see PackedCells)
    index: np.ndarray
    weights: np.ndarray  # len(index) x (d + 1): [-c, |c|^2 / 2] in VOTE_DTYPE


@dataclass(frozen=True)
class PackedCells:
    """Every cell end to end, for the compiled search (`kernels.search_cells`).

    An anchor cell ends with the far mutants, by distance from its anchor (`reach`, in units of
    `VoteIndex.scale`): a row of the cell is scored against them only as far as the triangle
    inequality says one could beat its best among the core (bench/RESULTS.md, "The default
    method at 100,000,000 rows, again": a tile there scored 3-7 of about 115 far mutants)."""

    weights: np.ndarray  # every cell's weights, cell after cell (float32, C order)
    members: np.ndarray  # every cell's candidate indices (int32), in the same order
    offsets: np.ndarray  # cell c is rows offsets[c]..offsets[c + 1] of both (int64)
    # where cell c's far mutants start (offsets[c + 1] when it has none), and each far
    # mutant's distance from the cell's anchor (float64; 0 for the other members)
    far_starts: np.ndarray
    reach: np.ndarray


@dataclass(frozen=True)
class VoteIndex:
    """A search structure over public candidates: cells (each row searches the members of its
    `probes` nearest cell centres) plus a global set every row searches."""

    n_candidates: int
    dim: int
    centres: Cell | None
    cells: tuple[Cell, ...]
    everyone: Cell | None
    probes: int
    tree: cKDTree | None = None
    scale: float = 1.0  # rows and candidates are scored in units of the largest candidate norm
    # The candidates in float64 (unscaled): uncertain rows are re-decided on direct distances.
    candidates: np.ndarray | None = None
    # The cells end to end, for the compiled search (`kernels.search_cells`).
    packed: PackedCells | None = None


def _packed_cells(
    candidates: np.ndarray,
    groups: list[np.ndarray],
    far: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[tuple[Cell, ...], PackedCells]:
    """One cell per group of candidate indices, their weights computed once end to end: each
    cell is a view of its part of the packed arrays. With `far`, cell c is groups[c] followed
    by far[c]'s candidates (ascending by their distances, far[c][1])."""
    parts = far or [(np.empty(0, dtype=np.intp), np.empty(0)) for _ in groups]
    pairs = list(zip(groups, parts, strict=True))
    whole = make_cell(candidates, np.concatenate([np.concatenate((g, f)) for g, (f, _) in pairs]))
    offsets = np.concatenate(([0], np.cumsum([len(g) + len(f) for g, (f, _) in pairs])))
    offsets = offsets.astype(np.int64)
    far_starts = offsets[:-1] + np.array([len(g) for g in groups], dtype=np.int64)
    reach = np.concatenate([np.concatenate((np.zeros(len(g)), r)) for g, (_, r) in pairs])
    cells = tuple(
        Cell(index=whole.index[a:b], weights=whole.weights[a:b])
        for a, b in itertools.pairwise(offsets)
    )
    packed = PackedCells(
        weights=whole.weights,
        members=whole.index,
        offsets=offsets,
        far_starts=far_starts,
        reach=reach,
    )
    return cells, packed


def make_cell(candidates: np.ndarray, index: np.ndarray) -> Cell:
    """The cell of candidates[index], its weights in VOTE_DTYPE."""
    chosen = candidates[index]
    weights = np.empty((len(index), candidates.shape[1] + 1), dtype=VOTE_DTYPE)
    weights[:, :-1] = -chosen
    weights[:, -1] = 0.5 * np.einsum("ij,ij->i", chosen, chosen)
    return Cell(index=np.asarray(index, dtype=np.int32), weights=weights)


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
    if layout is not None and layout.anchors > 1 and layout.per_anchor >= 1:
        return _anchor_cells(candidates, unit, scale, layout)
    if n > IVF_MIN_CANDIDATES:
        return _inverted_file(candidates, unit, scale)
    return VoteIndex(
        n_candidates=n,
        dim=d,
        centres=None,
        cells=(),
        everyone=make_cell(unit, np.arange(n)),
        scale=scale,
        probes=0,
        candidates=candidates,
    )


def _anchor_cells(
    candidates: np.ndarray, unit: np.ndarray, scale: float, layout: GroupLayout
) -> VoteIndex:
    """An evolved population's index: a cell per anchor (`unit`: the candidates / `scale`)."""
    n, d = candidates.shape
    k = layout.anchors
    cores, far, _ = group_cores(candidates, layout)
    # The far mutants go into every cell (one list per row) unless the copies would
    # outgrow the population: at k = 1638 with 1890 far mutants in 64 dimensions, the
    # copies took 0.8 GB and building them 2.6 s per iteration. The set S(x) searched is
    # the same either way.
    shared = len(far) * k > FAR_COPIES_PER_CANDIDATE * n
    by_reach = None if shared else [_by_distance(unit, far, g) for g in range(k)]
    cells, packed = _packed_cells(unit, cores, by_reach)
    return VoteIndex(
        n_candidates=n,
        dim=d,
        centres=make_cell(unit, np.arange(k)),
        cells=cells,
        everyone=make_cell(unit, far) if shared else None,
        probes=min(GROUP_PROBES, k),
        scale=scale,
        candidates=candidates,
        packed=packed,
    )


def _by_distance(
    unit: np.ndarray, members: np.ndarray, anchor: int
) -> tuple[np.ndarray, np.ndarray]:
    """`members` (candidate indices) in increasing distance from candidate `anchor`, and those
    distances (float64)."""
    diff = unit[members] - unit[anchor]
    gaps = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    order = np.argsort(gaps, kind="stable")
    return members[order], gaps[order]


def _inverted_file(candidates: np.ndarray, unit: np.ndarray, scale: float) -> VoteIndex:
    """A large unstructured population's index: cells around evenly spread centres."""
    n, d = candidates.shape
    n_cells = max(n // IVF_CELL_SIZE, 1)
    centre_index = np.linspace(0, n - 1, n_cells).round().astype(np.intp)
    centre_cell = make_cell(unit, centre_index)
    owner = np.empty(n, dtype=np.intp)
    for start in range(0, n, _OWNER_BLOCK_ROWS):
        chunk = unit[start : start + _OWNER_BLOCK_ROWS]
        scores = chunk @ centre_cell.weights[:, :-1].T.astype(np.float64)
        scores += centre_cell.weights[:, -1].astype(np.float64)
        owner[start : start + _OWNER_BLOCK_ROWS] = scores.argmin(axis=1)
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
