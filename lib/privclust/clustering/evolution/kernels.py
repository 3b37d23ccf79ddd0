"""Compiled loops (numba): the vote's hot path, where numpy would need several passes, and the
per-row products (HDPE's projection, the LSH codes) that must not depend on other rows.

The kernels are compiled once per process on first use (2.1 s in all here), or loaded (0.2 s,
with numba imported) from numba's on-disk cache when the package directory (or
NUMBA_CACHE_DIR) is writable. `warm_up()` compiles them ahead of time: the worker calls it
before it forks a process per job, so jobs start with the compiled code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np


def _jit(function: Callable[..., object]) -> Callable[..., object]:
    from numba import njit  # imported on first use: 0.2 s that most processes never need

    try:
        return njit(nogil=True, cache=True)(function)
    except RuntimeError:  # no writable cache location: compile per process instead
        return njit(nogil=True)(function)


class _Kernel:
    """Plain loops, compiled (nogil) on the first call; the loops' docstring documents it."""

    def __init__(
        self, loops: Callable[..., object], calls: dict[str, _Kernel] | None = None
    ) -> None:
        self._loops = loops
        self._calls = calls or {}  # global name in the loops -> the kernel it must call
        self.__doc__ = loops.__doc__
        self._lock = threading.Lock()
        self._compiled: Callable[..., object] | None = None

    def compiled(self) -> Callable[..., object]:
        with self._lock:  # the vote's threads may call a kernel first at the same time
            if self._compiled is None:
                # numba resolves globals when it compiles: bind the compiled callees first.
                for name, kernel in self._calls.items():
                    self._loops.__globals__[name] = kernel.compiled()
                self._compiled = _jit(self._loops)
            return self._compiled

    def __call__(self, *args: object) -> None:
        self.compiled()(*args)


def _merge_top2_loops(
    scores: np.ndarray,
    members: np.ndarray,
    best: np.ndarray,
    second: np.ndarray,
    best_index: np.ndarray,
) -> None:  # pragma: no cover - compiled (covered through `merge_top2`)
    """Merge the scores of `members` (candidates x rows, float32, C order) into each row's
    running (best, second, best_index), in place: best and second are the smallest and
    second-smallest scores seen so far (a repeated smallest value is also the second), and
    best_index the member of the first score strictly below the previous best. The same result
    as one pass of argmin plus one of min over the rest, in one pass and without the GIL.

    A NaN score leaves best and best_index unchanged and may or may not enter second: callers
    must not rely on it (the vote re-decides in float64 every row whose scores could be NaN or
    infinite, `vote._F32_SAFE_NORM`)."""
    n, m = scores.shape
    j = 0
    # Two candidates per pass over the rows' running values: half the loads and stores of them.
    while j + 1 < n:
        first_member = members[j]
        next_member = members[j + 1]
        for r in range(m):
            b = best[r]
            c = second[r]
            i = best_index[r]
            s = scores[j, r]
            t = s if s > b else b
            c = t if t < c else c
            i = first_member if s < b else i
            b = s if s < b else b
            s = scores[j + 1, r]
            t = s if s > b else b
            c = t if t < c else c
            i = next_member if s < b else i
            b = s if s < b else b
            best[r] = b
            second[r] = c
            best_index[r] = i
        j += 2
    if j < n:
        member = members[j]
        for r in range(m):
            b = best[r]
            s = scores[j, r]
            t = s if s > b else b
            second[r] = t if t < second[r] else second[r]
            if s < b:
                best[r] = s
                best_index[r] = member


merge_top2 = _Kernel(_merge_top2_loops)


def _ordered_best_loops(
    rows: np.ndarray,
    members_t: np.ndarray,
    members: np.ndarray,
    best: np.ndarray,
    best_index: np.ndarray,
) -> None:  # pragma: no cover - compiled (covered through `ordered_best`)
    """Merge candidates into each row's running (best, best_index), in place, exactly: the
    squared distance of row x to candidate c is summed over the coordinates in order,
    (x_0 - c_0)^2 + (x_1 - c_1)^2 + ..., each operation rounded on its own in float64 (bit for
    bit `vote._ordered_sq`); a smaller value wins, an equal one only with a lower index.

    rows: m x d float64; members_t: d x n float64, the candidates one per column; members: their
    indices (int64). Each row's answer depends on that row and the candidates alone. A NaN
    distance never wins."""
    m, d = rows.shape
    n = members_t.shape[1]
    sq = np.empty(n, dtype=np.float64)
    for r in range(m):
        # Coordinate by coordinate, each candidate's sum in the same order as
        # vote._ordered_sq (a rounded difference, a rounded square, a rounded sum: numba
        # contracts nothing into an FMA without fastmath), vectorised across candidates.
        x = rows[r, 0]
        for j in range(n):
            diff = x - members_t[0, j]
            sq[j] = diff * diff
        for i in range(1, d):
            x = rows[r, i]
            for j in range(n):
                diff = x - members_t[i, j]
                sq[j] += diff * diff
        b = best[r]
        found = best_index[r]
        for j in range(n):
            value = sq[j]
            if value < b or (value == b and members[j] < found):
                b = value
                found = members[j]
        best[r] = b
        best_index[r] = found


ordered_best = _Kernel(_ordered_best_loops)


def _far_limit_loops(
    tile_rows: np.ndarray, tile_best: np.ndarray, row_reach: np.ndarray, row_slack: np.ndarray
) -> float:  # pragma: no cover - compiled (covered through `search_cells`)
    """How far from its cell's point p a far member may lie and still beat the best so far of
    some row of a tile (rows `tile_rows`, bests `tile_best`, float32 scores). A row x lies at
    most row_reach[x] from p (exact distances, scaled units), its best at most sqrt(2 (b + w)
    + |x|^2) from x, b its float32 score and w its `vote._vote_window` (|float32 score - exact
    score| <= w): row_slack[x] = 2 w + |x|^2. A member r from p is at least r - row_reach[x]
    from x (triangle inequality). The largest bound over the tile, widened by 1 + 1e-6 (far
    beyond the float64 rounding of these distances and of `vote._ordered_sq`), or inf when one
    is NaN or infinite. A member beyond it is farther than each row's best: never its vote."""
    limit = 0.0
    for q in range(tile_rows.shape[0]):
        row = tile_rows[q]
        sq = 2.0 * np.float64(tile_best[q]) + row_slack[row]
        bound = row_reach[row] + np.sqrt(0.0 if sq < 0.0 else sq)  # NaN stays NaN
        if not bound < np.inf:
            return np.inf
        limit = max(limit, bound * (1.0 + 1e-6))
    return limit


far_limit = _Kernel(_far_limit_loops)

# The compiled callees of the cell search (bound by `_Kernel` before it is compiled). Until
# then, the plain loops.
_merge_top2_jit: Callable[..., None] = _merge_top2_loops
_far_limit_jit: Callable[..., float] = _far_limit_loops


def _search_cells_loops(
    rows: np.ndarray,
    order: np.ndarray,
    bounds: np.ndarray,
    weights: np.ndarray,
    offsets: np.ndarray,
    members: np.ndarray,
    far_starts: np.ndarray,
    reach: np.ndarray,
    row_reach: np.ndarray,
    row_slack: np.ndarray,
    tile_elements: int,
    best: np.ndarray,
    second: np.ndarray,
    best_index: np.ndarray,
) -> None:  # pragma: no cover - compiled (covered through `search_cells`)
    """`merge_top2` of every row against the members of its cell, all cells in one call
    without the GIL: cell c's rows are rows order[bounds[c]:bounds[c + 1]] of `rows` (n x d + 1,
    float32: `scaled_rows`), its members members[offsets[c]:offsets[c + 1]] with `weights`.
    Tiles of about `tile_elements` scores: rows gathered (one contiguous read each), BLAS gemms
    with the tile transposed, merged, scattered back. Members from far_starts[c] on are far,
    at distances reach (ascending) from the cell's point: scored after the others, and only up
    to `far_limit` of the tile."""
    for c in range(offsets.shape[0] - 1):
        first, far, end = offsets[c], far_starts[c], offsets[c + 1]
        step = max(1, tile_elements // max(end - first, 1))
        for start in range(bounds[c], bounds[c + 1], step):
            tile_rows = order[start : min(start + step, bounds[c + 1])]
            tile = np.empty((tile_rows.shape[0], rows.shape[1]), dtype=np.float32)
            tile_best = np.empty(tile_rows.shape[0], dtype=np.float32)
            tile_second = np.empty_like(tile_best)
            tile_index = np.empty(tile_rows.shape[0], dtype=np.int32)
            for q, row in enumerate(tile_rows):
                tile_best[q], tile_second[q], tile_index[q] = (
                    best[row],
                    second[row],
                    best_index[row],
                )
                for i in range(rows.shape[1]):
                    tile[q, i] = rows[row, i]
            lo, hi = first, end
            if end > far:  # the others first, then the far members within the tile's reach
                if far > first:
                    scores = np.dot(weights[first:far], tile.T)
                    _merge_top2_jit(scores, members[first:far], tile_best, tile_second, tile_index)
                limit = _far_limit_jit(tile_rows, tile_best, row_reach, row_slack)
                lo, hi = far, far + np.searchsorted(reach[far:end], limit, side="right")
            if hi > lo:
                scores = np.dot(weights[lo:hi], tile.T)  # candidates x rows
                _merge_top2_jit(scores, members[lo:hi], tile_best, tile_second, tile_index)
            for q, row in enumerate(tile_rows):
                best[row], second[row] = tile_best[q], tile_second[q]
                best_index[row] = tile_index[q]


search_cells = _Kernel(
    _search_cells_loops, calls={"_merge_top2_jit": merge_top2, "_far_limit_jit": far_limit}
)


def _smallest_scores_loops(
    scores: np.ndarray, probes: int, nearest: np.ndarray, edge: np.ndarray
) -> None:  # pragma: no cover - compiled (covered through `smallest_scores`)
    """Per row (column of `scores`, centres x rows, float32): the `probes` centres of smallest
    score (nearest[r], in increasing score), and the scores of the probes-th and the next
    smallest (edge[r] = [that, the next]; +inf when there are fewer centres). The same
    selection as numpy's argpartition at [probes - 1, probes], in one pass and without the GIL:
    which of two equal scores at the edge is taken is not defined by either (a caller treats an
    edge gap of 0 as a tie). NaN scores are never selected."""
    m, n = scores.shape
    keep = probes + 1
    values = np.empty(keep, dtype=np.float32)
    picks = np.empty(keep, dtype=np.int64)
    for r in range(n):
        for j in range(keep):
            values[j] = np.inf
            picks[j] = 0
        for c in range(m):
            s = scores[c, r]
            if not s < values[keep - 1]:
                continue
            j = keep - 1
            while j > 0 and s < values[j - 1]:
                values[j] = values[j - 1]
                picks[j] = picks[j - 1]
                j -= 1
            values[j] = s
            picks[j] = c
        for j in range(probes):
            nearest[r, j] = picks[j]
        edge[r, 0] = values[probes - 1]
        edge[r, 1] = values[probes]


smallest_scores = _Kernel(_smallest_scores_loops)


def _scaled_rows_loops(
    block: np.ndarray, inv_scale: float, rows: np.ndarray, norms: np.ndarray
) -> None:  # pragma: no cover - compiled (covered through `scaled_rows`)
    """The vote's inputs from a block of rows, in one pass: rows (n x d + 1, float32, C order)
    the augmented scaled rows [x * inv_scale, 1], and norms (n, float64) each scaled row's
    norm. Each coordinate is scaled in float64 (exact widening, one rounded product) and
    rounded once to float32; the norm sums the float64 squares in coordinate order. A row
    beyond float32 becomes infinite there and its norm infinite or NaN (the vote re-decides
    such rows in float64). numpy took 3 passes and 2 temporaries for the same (the rows then
    transposed: per 1,048,576 x 16 rows on one core, 0.142 s against 0.079 s for float64 rows,
    0.089 against 0.083 s for float32 ones, PE-means' working copy)."""
    n, d = block.shape
    for r in range(n):
        acc = 0.0
        for i in range(d):
            v = np.float64(block[r, i]) * inv_scale
            rows[r, i] = np.float32(v)
            acc += v * v
        norms[r] = np.sqrt(acc)
        rows[r, d] = np.float32(1.0)


scaled_rows = _Kernel(_scaled_rows_loops)


# Why not BLAS: it chooses its kernel, blocking and summation order by the shape of the product
# and a row's place in it (micro-kernel edges), so a row's product could change in its low bits
# with the number of other rows in its block or its position there: with a neighbouring dataset
# (one row more or less), other rows' projected votes or hash bits could change. The loops below
# give the same result whatever the rows around it.
def _ordered_products_loops(
    rows: np.ndarray, weights: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled (covered through `ordered_products`)
    """out = rows @ weights, every entry a function of its row and the weights alone:
    out[i, j] = ((rows[i, 0] w[0, j] + rows[i, 1] w[1, j]) + rows[i, 2] w[2, j]) + ..., the
    coordinates in increasing order, each product and each sum rounded on its own in float64
    (numba contracts nothing into an FMA and reorders nothing without fastmath: keep it off).

    rows: m x d, float32 or float64 (each element widened to float64, exactly); weights: d x p
    float64, C order; out: m x p float64, written. Rows go four at a time, sharing each load of
    the weights; the loop over the p outputs is contiguous, so LLVM vectorises across outputs,
    each output's sum still in order (2x faster than one row at a time, about as fast as
    one-thread BLAS). A row's arithmetic is the same in a group of four or alone."""
    m, d = rows.shape
    p = weights.shape[1]
    if d == 0:
        out[:, :] = 0.0
        return
    acc = np.empty((4, p))
    i = 0
    while i + 4 <= m:
        x0 = np.float64(rows[i, 0])
        x1 = np.float64(rows[i + 1, 0])
        x2 = np.float64(rows[i + 2, 0])
        x3 = np.float64(rows[i + 3, 0])
        for j in range(p):
            w = weights[0, j]
            acc[0, j] = x0 * w
            acc[1, j] = x1 * w
            acc[2, j] = x2 * w
            acc[3, j] = x3 * w
        for k in range(1, d):
            x0 = np.float64(rows[i, k])
            x1 = np.float64(rows[i + 1, k])
            x2 = np.float64(rows[i + 2, k])
            x3 = np.float64(rows[i + 3, k])
            for j in range(p):
                w = weights[k, j]
                acc[0, j] += x0 * w
                acc[1, j] += x1 * w
                acc[2, j] += x2 * w
                acc[3, j] += x3 * w
        for r in range(4):
            for j in range(p):
                out[i + r, j] = acc[r, j]
        i += 4
    while i < m:  # the last m mod 4 rows, by the same sums
        x = np.float64(rows[i, 0])
        for j in range(p):
            acc[0, j] = x * weights[0, j]
        for k in range(1, d):
            x = np.float64(rows[i, k])
            for j in range(p):
                acc[0, j] += x * weights[k, j]
        for j in range(p):
            out[i, j] = acc[0, j]
        i += 1


ordered_products = _Kernel(_ordered_products_loops)


def warm_up() -> None:
    """Compile (or load) every kernel now, for the signatures the jobs use."""
    scores = np.zeros((3, 2), dtype=np.float32)
    best = np.full(2, np.inf, dtype=np.float32)
    merge_top2(scores, np.arange(3, dtype=np.int32), best, best.copy(), np.zeros(2, np.int32))
    order, bounds = np.arange(2), np.array([0, 2])
    search_cells(
        np.ones((2, 3), dtype=np.float32),
        order,
        bounds,
        np.ones((3, 3), np.float32),
        bounds,
        np.arange(3, dtype=np.int32),
        np.array([1]),
        np.zeros(3),
        np.zeros(2),
        np.zeros(2),
        8,
        best,
        best.copy(),
        np.zeros(2, np.int32),
    )
    rows = np.zeros((2, 3))
    ordered_best(rows, np.zeros((3, 4)), np.arange(4), np.full(2, np.inf), np.zeros(2, np.int64))
    for dtype in (np.float64, np.float32):  # HDPE's projections, the LSH codes; the vote's rows
        ordered_products(np.zeros((5, 3), dtype=dtype), np.zeros((3, 2)), np.empty((5, 2)))
        scaled_rows(np.zeros((2, 3), dtype=dtype), 1.0, np.empty((2, 4), np.float32), np.empty(2))
    smallest_scores(
        np.zeros((3, 2), np.float32), 1, np.empty((2, 1), np.int64), np.empty((2, 2), np.float32)
    )
