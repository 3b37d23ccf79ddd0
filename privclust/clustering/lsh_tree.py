"""The LSH coreset's noisy prefix tree (after Chang and Kamath): SimHash codes of the rows, and
a tree over their prefixes grown from noisy counts (privclust.clustering.methods.lsh_coreset).

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
   The leaves are the kept nodes without kept children (the root included): disjoint sets of
   rows.
"""

from __future__ import annotations

import numpy as np

from privclust.clustering.kernels import ordered_products
from privclust.clustering.options import Progress
from privclust.clustering.plan import RunPlan
from privclust.privacy import noise

# At most this many nodes branch at a level (those with the largest noisy counts; the others
# become leaves), which bounds the count vectors and the coreset whatever the thresholds.
MAX_BRANCHING_NODES = 4096
# Values per block of the hashing (bounds a block's products).
_BLOCK_ELEMENTS = 1 << 20


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


class _Leaves:
    """The tree's leaves as they are closed, level by level: each row's leaf (-1: none) and
    each leaf's noisy count."""

    def __init__(self, n_rows: int) -> None:
        self.leaf = np.full(n_rows, -1, dtype=np.int64)
        self.counts: list[np.ndarray] = []
        self.n_leaves = 0

    def close(self, node: np.ndarray, counts: np.ndarray, is_leaf: np.ndarray) -> None:
        """Make leaves of the nodes `is_leaf` of a level (`node`: each row's node there, -1
        for none; `counts`: the nodes' noisy counts)."""
        ids = np.full(len(is_leaf), -1, dtype=np.int64)
        ids[is_leaf] = np.arange(self.n_leaves, self.n_leaves + int(is_leaf.sum()))
        member = node >= 0
        self.leaf[member] = np.where(is_leaf[node[member]], ids[node[member]], self.leaf[member])
        self.counts.append(counts[is_leaf])
        self.n_leaves += int(is_leaf.sum())


def _children_of_rows(
    codes: np.ndarray, node: np.ndarray, n_nodes: int, parents: np.ndarray, shift: int, fanout: int
) -> tuple[np.ndarray, np.ndarray]:
    """(the rows in a branching node, the child of that node each of them falls into, numbered
    parent by parent): the child is the code's digit at `shift`."""
    slot = np.full(n_nodes, -1, dtype=np.int64)
    slot[parents] = np.arange(len(parents))
    member = node >= 0
    row_slot = np.full(len(codes), -1, dtype=np.int64)
    row_slot[member] = slot[node[member]]
    moving = row_slot >= 0
    digit = (codes[moving] >> shift) & np.int64(fanout - 1)
    return moving, row_slot[moving] * fanout + digit


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
    leaves = _Leaves(len(codes))
    # Kept nodes of the current level: each row's node (-1: none), their noisy counts, and
    # which of them branch.
    node = np.zeros(len(codes), dtype=np.int64)
    counts = np.array([plan.n_rows], dtype=np.int64)
    branching = branching_nodes(counts, branch_count)
    for t in range(1, levels + 1):
        parents = np.flatnonzero(branching)
        shift = (levels - t) * bits_per_level
        moving, child_of_row = _children_of_rows(codes, node, len(counts), parents, shift, fanout)
        exact = np.bincount(child_of_row, minlength=len(parents) * fanout).astype(np.int64)
        noisy = noise.integer_release(
            exact, sensitivity=plan.count_sensitivity, sigma=plan.sigma, rng=rng
        )
        kept = noisy >= min_count
        has_kept_child = kept.reshape(len(parents), fanout).any(axis=1)
        # Leaves of this level: kept nodes that did not branch, or branched into nothing kept.
        is_leaf = ~branching
        is_leaf[parents[~has_kept_child]] = True
        leaves.close(node, counts, is_leaf)
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
    leaves.close(node, counts, np.ones(len(counts), dtype=bool))
    return leaves.leaf, np.concatenate(leaves.counts)
