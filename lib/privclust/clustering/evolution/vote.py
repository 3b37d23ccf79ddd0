"""The PE-means vote: the candidate each row votes for, and the vote histogram.

The vote does not need the globally nearest candidate (privclust.clustering.evolution.nearest
finds that):
privacy needs each row's vote to be a function of that row and the public candidates (adding or
removing a row then changes exactly one bin by one). It searches a structure built from the
candidates (`vote_cells.vote_index`) and returns, for every row x, the ideal vote v*(x): the
lowest index minimising the float64 squared distance `_ordered_sq` over S(x), the members of the
cell(s) of x's nearest centre(s) (same distance, lowest index on ties) plus a global set. Scores
are taken in float32 with BLAS, whose rounding may depend on the other rows of a call (matrix
shapes select kernels); a rigorous per-row rounding window (`_vote_window`) flags every row whose
float32 answer could differ from v*(x), and those rows are re-decided in float64 by elementwise
arithmetic that involves no other row. So each vote is a function of its row alone, whatever
BLAS does with the shapes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from privclust.clustering.data.rows import Part
from privclust.clustering.evolution.kernels import (
    ordered_best,
    scaled_rows,
    search_cells,
    smallest_scores,
)
from privclust.clustering.evolution.nearest import GroupLayout, worker_count
from privclust.clustering.evolution.variation import Variations
from privclust.clustering.evolution.vote_cells import VOTE_DTYPE, Cell, VoteIndex, vote_index

_EPS = float(np.finfo(np.float64).eps)
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
    augmented rows one per column (`rows_t`: the transposed view of `scaled_rows`). Some
    OpenBLAS kernels leave the FE_INVALID flag set on finite inputs (numpy issue 24067,
    OpenBLAS issue 1924), which numpy reports as "invalid value encountered in matmul": seen
    once in four CI runs on this machine, on 150 x 5 finite rows. The flag is ignored here:
    scores can only be NaN or infinite for rows whose norm is above _F32_SAFE_NORM or NaN, and
    `_fast_block` sends those to the exact float64 re-decision (`_ideal_votes`) whatever their
    scores."""
    with np.errstate(invalid="ignore"):
        return weights @ rows_t


def _best_in(
    rows: np.ndarray,
    cell: Cell,
    best: np.ndarray,
    second: np.ndarray,
    best_index: np.ndarray,
) -> None:
    """Merge the members of `cell` into (best, second, best_index) of the augmented scaled
    rows `rows` (`kernels.scaled_rows`): the best and second-best float32 scores seen so far
    and the index of the best (strict improvement only). `kernels.search_cells` with every row
    in the one cell."""
    n_rows, size = len(rows), len(cell.index)
    unused = np.zeros(n_rows)
    search_cells(
        rows,
        np.arange(n_rows),
        np.array([0, n_rows]),
        cell.weights,
        np.array([0, size]),
        cell.index,
        np.array([size]),  # no far members
        np.zeros(size),
        unused,
        unused,
        VOTE_SCORE_ELEMENTS,
        best,
        second,
        best_index,
    )


def _cell_order(cell_of_row: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by cell (ascending within a cell) and where each cell's rows start:
    cell c's rows are order[bounds[c]:bounds[c + 1]]. (A stable order is unique; numpy finds it
    by a radix sort on 16-bit keys, 5x faster than on the 64-bit cell numbers: 0.5 s of CPU
    per million rows over a job's votes.)"""
    if n_cells < 2**15:
        cell_of_row = cell_of_row.astype(np.int16)
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
    # The augmented rows [x / scale, 1] in float32, one per row: each cell's gemm scores
    # candidates x rows from a tile of them, and a row's running best is updated along
    # contiguous memory (`merge_top2`). Rows beyond float32 are flagged below (_F32_SAFE_NORM).
    rows = np.empty((n, d + 1), dtype=VOTE_DTYPE)
    norms = np.empty(n)
    scaled_rows(np.ascontiguousarray(block), 1.0 / index.scale, rows, norms)
    window = _vote_window(norms, d)
    best = np.full(n, np.inf, dtype=VOTE_DTYPE)
    second = np.full(n, np.inf, dtype=VOTE_DTYPE)
    best_index = np.zeros(n, dtype=np.int32)
    uncertain = ~(norms <= _F32_SAFE_NORM)
    if index.everyone is not None:
        _best_in(rows, index.everyone, best, second, best_index)
    if index.centres is not None:
        nearest, reach = _probed_cells(rows, index, window, uncertain, norms)
        packed = index.packed
        assert packed is not None
        for probe in range(nearest.shape[1]):
            # One compiled call per probe for every cell; a row probing several cells keeps
            # one running best across them.
            order, bounds = _cell_order(nearest[:, probe], len(index.cells))
            search_cells(
                rows,
                order,
                bounds,
                packed.weights,
                packed.offsets,
                packed.members,
                packed.far_starts,
                packed.reach,
                reach,
                2.0 * window + norms * norms,  # `kernels.far_limit`
                VOTE_SCORE_ELEMENTS,
                best,
                second,
                best_index,
            )
    with np.errstate(invalid="ignore"):  # inf - inf: uncertain
        gap = second.astype(np.float64) - best
    uncertain |= ~(gap > 2.0 * window)
    return best_index.astype(np.intp), uncertain


def _probed_cells(
    rows: np.ndarray,
    index: VoteIndex,
    window: np.ndarray,
    uncertain: np.ndarray,
    norms: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The cells each row searches (one column per probe: its `probes` nearest cell centres by
    float32 score), marking in `uncertain` the rows whose choice is within 2 windows of a tie;
    and, when each row searches one cell, a bound on each row's distance from that cell's
    centre, from its score (`kernels.search_cells` prunes an anchor cell's far mutants with it;
    infinite otherwise: no pruning)."""
    assert index.centres is not None
    n = len(rows)
    probes, n_centres = index.probes, len(index.centres.index)
    if probes == 1 < n_centres:
        # The nearest centre and the gap to the next: the chosen cell is the exact one
        # unless they differ by <= 2w (NaN or inf gaps count as uncertain).
        centre_best = np.full(n, np.inf, dtype=VOTE_DTYPE)
        centre_next = np.full(n, np.inf, dtype=VOTE_DTYPE)
        nearest_centre = np.zeros(n, dtype=np.int32)
        _best_in(rows, index.centres, centre_best, centre_next, nearest_centre)
        with np.errstate(invalid="ignore"):  # inf - inf: uncertain
            uncertain |= ~(centre_next.astype(np.float64) - centre_best > 2.0 * window)
            # |x_s - a|^2 = 2 (exact score) + |x_s|^2, the exact score at most the float32
            # one plus the window (NaN or infinite: the search then prunes nothing)
            reach = np.sqrt(np.maximum(2.0 * (centre_best + window) + norms * norms, 0.0))
        return nearest_centre[:, None], reach
    if probes < n_centres:
        # The probes best centres, and the gap from the probes-th to the next one, with the
        # same rule at the probes-th (a compiled selection: numpy's argpartition along rows
        # took 0.5 s of CPU per million rows).
        nearest = np.empty((n, probes), dtype=np.intp)
        edge = np.empty((n, 2), dtype=VOTE_DTYPE)
        smallest_scores(_scores(index.centres.weights, rows.T), probes, nearest, edge)
        with np.errstate(invalid="ignore"):  # inf - inf: uncertain
            gap = edge[:, 1].astype(np.float64) - edge[:, 0]
        uncertain |= ~(gap > 2.0 * window)
        return nearest, np.full(n, np.inf)
    return np.broadcast_to(np.arange(n_centres), (n, n_centres)), np.full(n, np.inf)


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


@dataclass(frozen=True, eq=False)
class VoteCounts:
    """The vote histogram of a partition (`nearest_candidate_votes`): a pass's statistic.
    `recipe`, when the candidates are anchors and their variations, says how to draw them
    again (a federation sends it instead of the candidates)."""

    candidates: np.ndarray
    layout: GroupLayout | None = None
    recipe: Variations | None = None

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        return (nearest_candidate_votes(part.points, self.candidates, self.layout),)
