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

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Part, Rows, token
from privclust.clustering.evolution.kernels import ordered_products
from privclust.clustering.mechanisms.grid import cluster_grid_sums, sum_sensitivity
from privclust.clustering.run.options import Progress
from privclust.clustering.run.plan import RunPlan

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


@dataclass(frozen=True, eq=False)
class Level:
    """One level of the grown tree, public (released counts and thresholds decided it): the
    branching nodes of the level above (`parents`, in its numbering), the node each child slot
    became at this level (`new_index`, -1: not kept), and the leaf each node of the level
    above became (`leaf_ids`, -1: not a leaf)."""

    parents: np.ndarray
    new_index: np.ndarray
    leaf_ids: np.ndarray


@dataclass(frozen=True, eq=False)
class Walk:
    """How a row walks down the tree grown so far: a function of its code and the public
    levels alone, so every partition of the rows can replay it where it is read."""

    levels: int
    bits_per_level: int
    history: tuple[Level, ...]

    def nodes(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(each row's node at the last level of `history`, -1 for none; each row's leaf among
        the levels above it, -1 for none; how many nodes that last level has)."""
        fanout = 1 << self.bits_per_level
        node = np.zeros(len(codes), dtype=np.int64)
        leaf = np.full(len(codes), -1, dtype=np.int64)
        n_nodes = 1
        for t, level in enumerate(self.history, start=1):
            _close(leaf, node, level.leaf_ids)
            shift = (self.levels - t) * self.bits_per_level
            moving, child = _children_of_rows(codes, node, n_nodes, level.parents, shift, fanout)
            node = np.full(len(codes), -1, dtype=np.int64)
            node[moving] = level.new_index[child]
            n_nodes = int((level.new_index >= 0).sum())
        return node, leaf, n_nodes


def _close(leaf: np.ndarray, node: np.ndarray, leaf_ids: np.ndarray) -> None:
    """Rows in a node that is a leaf (`leaf_ids` >= 0) take that leaf."""
    member = node >= 0
    ids = leaf_ids[node[member]]
    leaf[member] = np.where(ids >= 0, ids, leaf[member])


@dataclass(frozen=True, eq=False)
class ChildCounts:
    """A pass's statistic: how many rows fall into each child of the branching nodes `parents`
    of the last level of `walk` (numbered parent by parent)."""

    codes: Callable[[np.ndarray], np.ndarray]
    key: str
    walk: Walk
    parents: np.ndarray

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        codes = part.derived(self.key, self.codes).points
        node, _, n_nodes = self.walk.nodes(codes)
        fanout = 1 << self.walk.bits_per_level
        shift = (self.walk.levels - len(self.walk.history) - 1) * self.walk.bits_per_level
        _, child = _children_of_rows(codes, node, n_nodes, self.parents, shift, fanout)
        return (np.bincount(child, minlength=len(self.parents) * fanout).astype(np.int64),)


@dataclass(frozen=True, eq=False)
class LeafSums:
    """A pass's statistic: each leaf's exact grid sums (rows in no leaf go to an extra bucket,
    the last, that is dropped here: it is never released)."""

    codes: Callable[[np.ndarray], np.ndarray]
    key: str
    walk: Walk
    last_leaf_ids: np.ndarray
    n_leaves: int
    radius: float

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        codes = part.derived(self.key, self.codes).points
        node, leaf, _ = self.walk.nodes(codes)
        _close(leaf, node, self.last_leaf_ids)
        part.forget(self.key)  # the last pass that reads the codes
        labels = np.where(leaf >= 0, leaf, self.n_leaves)
        sums, _ = cluster_grid_sums(part.points, labels, self.n_leaves + 1, self.radius)
        return (sums[: self.n_leaves],)


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


@dataclass(frozen=True)
class Tree:
    """The grown tree: every leaf's noisy grid sums (k x d, in leaf order) and noisy count."""

    sums: np.ndarray
    counts: np.ndarray


def grow_tree(
    rows: Rows,
    normals: np.ndarray,
    plan: RunPlan,
    *,
    bits_per_level: int,
    min_count: int,
    branch_count: int,
    radius: float,
    sum_weight: int,
    rng: np.random.Generator,
    progress: Progress | None,
) -> Tree:
    """The leaves' noisy grid sums and noisy counts.

    One integer release per level (plan.iterations of them) of the counts of all children of the
    branching nodes; see the module docstring. Each level is one pass over the rows
    (`ChildCounts`), each row walking down the public levels above it; a last pass sums the
    rows of every leaf (`LeafSums`), released with noise priced as `sum_weight` releases
    (`grid.sum_sensitivity`).
    """
    levels = plan.iterations
    fanout = 1 << bits_per_level
    # x -> its SimHash code for the public hyperplanes, as a partition derives it.
    codes, key = partial(hash_codes, normals=normals), token(normals)
    history: list[Level] = []
    leaf_counts: list[np.ndarray] = []
    n_leaves = 0
    # Kept nodes of the current level: their noisy counts, and which of them branch.
    counts = np.array([plan.n_rows], dtype=np.int64)
    level_noise = (Gaussian(plan.count_sensitivity, plan.sigma),)
    branching = branching_nodes(counts, branch_count)
    for t in range(1, levels + 1):
        parents = np.flatnonzero(branching)
        walk = Walk(levels, bits_per_level, tuple(history))
        (noisy,) = rows.release(ChildCounts(codes, key, walk, parents), level_noise, rng)
        kept = noisy >= min_count
        has_kept_child = kept.reshape(len(parents), fanout).any(axis=1)
        # Leaves of this level: kept nodes that did not branch, or branched into nothing kept.
        is_leaf = ~branching
        is_leaf[parents[~has_kept_child]] = True
        leaf_ids, n_leaves = _leaf_ids(is_leaf, n_leaves)
        leaf_counts.append(counts[is_leaf])
        # The next level: the kept children; every other row is in no node from now on.
        new_index = np.full(len(kept), -1, dtype=np.int64)
        new_index[kept] = np.arange(int(kept.sum()))
        history.append(Level(parents=parents, new_index=new_index, leaf_ids=leaf_ids))
        counts = noisy[kept]
        branching = (
            branching_nodes(counts, branch_count) if t < levels else np.zeros(len(counts), bool)
        )
        if progress is not None:
            progress(t, plan.progress_total)
    last_ids, n_leaves = _leaf_ids(np.ones(len(counts), dtype=bool), n_leaves)
    leaf_counts.append(counts)
    walk = Walk(levels, bits_per_level, tuple(history))
    leaf_sums = LeafSums(codes, key, walk, last_ids, n_leaves, radius)
    sums_noise = (Gaussian(sum_sensitivity(plan, rows.shape[1]), plan.sigma, sum_weight),)
    (sums,) = rows.release(leaf_sums, sums_noise, rng)
    return Tree(sums=sums, counts=np.concatenate(leaf_counts))


def _leaf_ids(is_leaf: np.ndarray, n_leaves: int) -> tuple[np.ndarray, int]:
    """Leaf ids for the nodes `is_leaf` of a level, numbered on from `n_leaves`; -1 elsewhere."""
    ids = np.full(len(is_leaf), -1, dtype=np.int64)
    ids[is_leaf] = np.arange(n_leaves, n_leaves + int(is_leaf.sum()))
    return ids, n_leaves + int(is_leaf.sum())
