"""The vote's search (privclust.clustering.evolution.vote_cells.vote_index, vote.vote_labels) and
the selection step."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans

from privclust.clustering.data.domain import prepare_rows
from privclust.clustering.evolution import nearest, selection, vote, vote_cells
from privclust.clustering.evolution.nearest import group_cores
from privclust.clustering.evolution.packing import initial_population, sphere_packing
from privclust.clustering.evolution.variation import levy_variations


def _exact_sq(points: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    return np.asarray(cdist(points, candidates, "sqeuclidean"))


def _clear_winners(points: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact nearest candidate per row, and a mask of the rows whose best squared distance is
    below the second best by far more than float32 rounding (no near-ties)."""
    sq = _exact_sq(points, candidates)
    order = np.sort(sq, axis=1)
    scale = (np.linalg.norm(points, axis=1) + np.linalg.norm(candidates, axis=1).max()) ** 2
    return sq.argmin(axis=1), order[:, 1] - order[:, 0] > 2e-5 * scale


def _evolved(rng: np.random.Generator, k: int, per: int, d: int) -> np.ndarray:
    # Anchors far apart (the grouped search is exact when every row is nearer its own anchor's
    # group than any other's), each with its Levy mutants.
    anchors = np.eye(k, d) * 0.6 if k <= d else rng.normal(size=(k, d)) * 0.5
    return np.concatenate([anchors, levy_variations(anchors, per, 1.0, rng)])


@pytest.mark.parametrize("d", [2, 4, 8, 16])
def test_grouped_vote_equals_the_exact_vote_without_near_ties(d: int) -> None:
    rng = np.random.default_rng(10 + d)
    k, per = 4, 200
    candidates = _evolved(rng, k, per, d)
    points = candidates[rng.integers(k, size=2000)] + rng.normal(scale=0.03, size=(2000, d))
    layout = nearest.GroupLayout(anchors=k, per_anchor=per)
    exact, clear = _clear_winners(points, candidates)
    assert clear.mean() > 0.3  # the check below covers many rows
    labels = vote.vote_labels(points, vote_cells.vote_index(candidates, layout))
    np.testing.assert_array_equal(labels[clear], exact[clear])


@pytest.mark.parametrize(("n", "d"), [(500, 3), (500, 16), (3000, 8), (3000, 16)])
def test_unstructured_vote_equals_the_exact_vote_without_near_ties(
    n: int, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KD-tree (d <= 6), brute force (small populations) and, with every cell probed, the
    # inverted file: all exact up to float32 rounding.
    rng = np.random.default_rng(n + d)
    candidates = sphere_packing(n, d, 1.0, rng)
    points = rng.normal(size=(2000, d)) * 0.4
    monkeypatch.setattr(vote_cells, "IVF_PROBES", 10**6)
    index = vote_cells.vote_index(candidates)
    if n > vote_cells.IVF_MIN_CANDIDATES and d > nearest.TREE_MAX_DIM:
        assert len(index.cells) > 1 and index.probes == len(index.cells)
    exact, clear = _clear_winners(points, candidates)
    labels = vote.vote_labels(points, index)
    np.testing.assert_array_equal(labels[clear], exact[clear])


def test_inverted_file_votes_for_a_near_candidate() -> None:
    # With the default probes the first iteration's search is approximate: measure that it
    # stays close (bench/RESULTS.md has the figures at scale; these bounds have wide margins).
    rng = np.random.default_rng(3)
    candidates = sphere_packing(4096, 16, 1.0, rng)
    points = rng.normal(size=(3000, 16)) * 0.2
    index = vote_cells.vote_index(candidates)
    assert index.probes < len(index.cells)
    labels = vote.vote_labels(points, index)
    sq = _exact_sq(points, candidates)
    found = sq[np.arange(len(points)), labels]
    assert np.mean(labels == sq.argmin(axis=1)) > 0.8
    assert found.mean() < 1.02 * sq.min(axis=1).mean()


@pytest.mark.parametrize("layout", [None, nearest.GroupLayout(anchors=5, per_anchor=40)])
@pytest.mark.parametrize("d", [2, 12])
def test_one_vote_per_row_that_does_not_depend_on_the_other_rows(
    layout: nearest.GroupLayout | None, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small blocks so that rows land in different blocks (and threads) when searched together.
    monkeypatch.setattr(vote, "VOTE_BLOCK_ROWS", 64)
    monkeypatch.setattr(vote_cells, "IVF_MIN_CANDIDATES", 100)
    rng = np.random.default_rng(d)
    candidates = _evolved(rng, 5, 40, d)
    candidates[7] = candidates[3]  # coincident candidates: still one vote per row
    points = np.concatenate(
        [
            candidates[rng.integers(len(candidates), size=300)],  # rows on candidates
            rng.normal(size=(300, d)),
            rng.normal(size=(20, d)) * 1e3,  # far outside the ball
            np.zeros((5, d)),  # duplicate rows
        ]
    )
    index = vote_cells.vote_index(candidates, layout)
    labels = vote.vote_labels(points, index)
    assert labels.shape == (len(points),)
    assert labels.min() >= 0 and labels.max() < len(candidates)
    votes = vote.nearest_candidate_votes(points, candidates, layout)
    assert votes.dtype == np.int64 and votes.sum() == len(points)
    np.testing.assert_array_equal(votes, np.bincount(labels, minlength=len(candidates)))
    # Any subset, in any order, searched with other rows or alone: the same vote per row.
    order = rng.permutation(len(points))[:400]
    np.testing.assert_array_equal(vote.vote_labels(points[order], index), labels[order])
    alone = [vote.vote_labels(points[i : i + 1], index)[0] for i in order[:50]]
    np.testing.assert_array_equal(alone, labels[order[:50]])


def test_vote_of_float32_rows_matches_float64_rows_without_near_ties() -> None:
    rng = np.random.default_rng(5)
    candidates = _evolved(rng, 4, 100, 16)
    points = candidates[rng.integers(4, size=1000)] + rng.normal(scale=0.03, size=(1000, 16))
    index = vote_cells.vote_index(candidates, nearest.GroupLayout(4, 100))
    exact, clear = _clear_winners(points, candidates)
    single = vote.vote_labels(points.astype(np.float32), index)
    np.testing.assert_array_equal(single[clear], exact[clear])


@pytest.mark.parametrize("radius", [1e-30, 1e25])
@pytest.mark.parametrize("layout", [None, nearest.GroupLayout(4, 100)])
def test_vote_is_scale_free(radius: float, layout: nearest.GroupLayout | None) -> None:
    # float32 squares of 1e25 overflow and of 1e-30 underflow: scores are taken in units of the
    # largest candidate norm, so any declared radius votes like radius 1.
    rng = np.random.default_rng(6)
    candidates = _evolved(rng, 4, 100, 12)
    points = candidates[rng.integers(4, size=1000)] + rng.normal(scale=0.03, size=(1000, 12))
    exact, clear = _clear_winners(points, candidates)
    index = vote_cells.vote_index(candidates * radius, layout)
    labels = vote.vote_labels((points * radius).astype(np.float32), index)
    np.testing.assert_array_equal(labels[clear], exact[clear])


def test_empty_rows_give_an_empty_histogram() -> None:
    candidates = np.eye(3)
    votes = vote.nearest_candidate_votes(np.empty((0, 3)), candidates)
    np.testing.assert_array_equal(votes, np.zeros(3, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# Selection: weighted k-means


def test_weighted_kmeans_matches_scikit_learn_inertia() -> None:
    rng = np.random.default_rng(8)
    centres = rng.normal(size=(16, 6)) * 3
    points = centres[rng.integers(16, size=600)] + rng.normal(size=(600, 6)) * 0.5
    weights = rng.integers(1, 60, size=600).astype(float)

    def inertia(found: np.ndarray) -> float:
        return float((_exact_sq(points, found).min(axis=1) * weights).sum())

    ours = selection.weighted_kmeans(points, weights, 16, 5, rng)
    assert ours.shape == (16, 6)
    reference = KMeans(16, n_init=5, random_state=0).fit(points, sample_weight=weights)
    assert inertia(ours) <= 1.02 * inertia(reference.cluster_centers_)


def test_weighted_kmeans_follows_the_weights_and_survives_duplicates() -> None:
    rng = np.random.default_rng(9)
    points = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.0, 5.0], [5.0, 5.0], [9.0, 0.0]])
    weights = np.array([1.0, 3.0, 2.0, 2.0, 2.0, 4.0])
    found = selection.weighted_kmeans(points, weights, 3, 5, rng)
    got = sorted(map(tuple, np.round(found, 6)))
    assert got == [(0.075, 0.0), (5.0, 5.0), (9.0, 0.0)]
    # Fewer distinct points than k: still k finite centres.
    same = selection.weighted_kmeans(np.ones((6, 2)), np.ones(6), 3, 5, rng)
    assert same.shape == (3, 2) and np.isfinite(same).all()


# ---------------------------------------------------------------------------------------------
# Working copy and packing cache


def test_float32_working_copy_from_a_memory_map(tmp_path: object) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(70_000, 5)) * 2
    path = f"{tmp_path}/x.npy"
    np.save(path, X)
    mapped = np.load(path, mmap_mode="r")
    full, c = prepare_rows(X, 3.0, np.ones(5))
    single, c32 = prepare_rows(mapped, 3.0, np.ones(5), dtype=np.float32)
    assert single.dtype == np.float32 and single.shape == X.shape
    np.testing.assert_array_equal(c, c32)
    np.testing.assert_array_equal(single, full.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(mapped), X)  # the map is still readable


def test_cached_packing_is_cut_to_the_population_size() -> None:
    points = initial_population(1000, 3, 2.0, None)
    again = initial_population(1003, 3, 2.0, None)
    assert points.shape == (1000, 3) and again.shape == (1003, 3)
    np.testing.assert_array_equal(points, again[:1000])  # one cached packing serves both
    assert np.linalg.norm(points, axis=1).max() <= 2.0
    gaps = np.sqrt(_exact_sq(points, points) + np.eye(1000) * 1e9).min()
    assert gaps > 0.0


# ---------------------------------------------------------------------------------------------
# The vote is the ideal vote v*(x): a function of the row alone, even at float32 near-ties


def _ideal_votes(points: np.ndarray, index: vote_cells.VoteIndex) -> np.ndarray:
    """v*(x) computed independently, one row at a time: S(x) from brute-force float64 distances
    to the centres (probes nearest, lowest index on ties) plus the global set, then the
    lowest-index argmin of the squared distances over S(x). Distances are summed coordinate by
    coordinate in order (the order the vote defines), so exact float64 ties agree."""
    assert index.candidates is not None
    cands = index.candidates
    out = np.empty(len(points), dtype=np.intp)
    for r, row in enumerate(points.astype(np.float64)):
        subset = _ideal_members(row, index)
        out[r] = subset[np.argmin(_seq_sq(row, cands[subset]))]
    return out


def _seq_sq(row: np.ndarray, cands: np.ndarray) -> np.ndarray:
    acc = np.zeros(len(cands))
    for col in range(len(row)):
        acc += (row[col] - cands[:, col]) ** 2
    return acc


def _ideal_members(row: np.ndarray, index: vote_cells.VoteIndex) -> np.ndarray:
    assert index.candidates is not None
    members = [index.everyone.index] if index.everyone is not None else []
    if index.centres is not None:
        sq = _seq_sq(row, index.candidates[index.centres.index])
        members += [index.cells[c].index for c in np.argsort(sq, kind="stable")[: index.probes]]
    return np.sort(np.concatenate(members))


def _tie_rows(rng: np.random.Generator, index: vote_cells.VoteIndex, n: int) -> np.ndarray:
    """Rows at or within 1e-7 relative of a tie: random rows moved onto the bisector of their
    two nearest searched candidates (member ties) or of their probes-th and next centres
    (cell-boundary ties), then perturbed by 0 or 1e-10..1e-7 relative."""
    assert index.candidates is not None and index.centres is not None
    cands = index.candidates
    rows = []
    for i in range(n):
        x = rng.normal(size=index.dim) * 0.4
        if i % 2:
            centres = index.centres.index
            sq = _seq_sq(x, cands[centres])
            pair = centres[np.argsort(sq)[index.probes - 1 : index.probes + 1]]
        else:
            searched = _ideal_members(x, index)
            sq = _seq_sq(x, cands[searched])
            pair = searched[np.argsort(sq)[:2]]
        a, b = cands[pair[0]], cands[pair[1]]
        x = x - (2 * x @ (b - a) + a @ a - b @ b) / (2 * (b - a) @ (b - a)) * (b - a)
        jitter = 0.0 if i % 3 == 0 else 10.0 ** rng.uniform(-10, -7)
        rows.append(x * (1.0 + jitter * rng.normal(size=x.shape)))
    return np.array(rows)


def _shared_far_index(candidates: np.ndarray, layout: nearest.GroupLayout) -> vote_cells.VoteIndex:
    """The grouped index with its far mutants kept as one global set (as for large k)."""
    saved = vote_cells.FAR_COPIES_PER_CANDIDATE
    vote_cells.FAR_COPIES_PER_CANDIDATE = 0
    try:
        index = vote_cells.vote_index(candidates, layout)
    finally:
        vote_cells.FAR_COPIES_PER_CANDIDATE = saved
    assert index.everyone is not None and len(index.everyone.index) > 0
    return index


SIX_GROUPS = nearest.GroupLayout(6, 60)


def _six_groups(rng: np.random.Generator, d: int) -> tuple[np.ndarray, vote_cells.VoteIndex]:
    """An evolved population of 6 groups of 60 in `d` dimensions and its grouped vote index."""
    evolved = _evolved(rng, 6, 60, d)
    return evolved, vote_cells.vote_index(evolved, SIX_GROUPS)


def _index_cases(rng: np.random.Generator, d: int) -> list[vote_cells.VoteIndex]:
    evolved, grouped = _six_groups(rng, d)
    packing = sphere_packing(3000, d, 1.0, rng)
    return [
        grouped,
        _shared_far_index(evolved, SIX_GROUPS),
        vote_cells.vote_index(packing),  # inverted file (d > TREE_MAX_DIM)
    ]


@pytest.mark.parametrize("d", [8, 16])
def test_far_mutants_in_every_cell_or_in_one_set_give_the_same_votes(d: int) -> None:
    # Large k keeps the far mutants as one set instead of k copies; S(x) is the same set.
    rng = np.random.default_rng(70 + d)
    evolved, copied = _six_groups(rng, d)
    assert copied.everyone is None
    shared = _shared_far_index(evolved, SIX_GROUPS)
    points = np.concatenate([rng.normal(size=(3000, d)) * 0.4, _tie_rows(rng, copied, 60)])
    np.testing.assert_array_equal(
        vote.vote_labels(points, copied), vote.vote_labels(points, shared)
    )


@pytest.mark.parametrize("d", [8, 16])
def test_votes_are_the_ideal_votes_alone_in_small_blocks_and_in_large_ones(d: int) -> None:
    rng = np.random.default_rng(40 + d)
    for index in _index_cases(rng, d):
        assert index.centres is not None
        ties = _tie_rows(rng, index, 60)
        _, flagged = vote._fast_block(ties, index)
        assert flagged.mean() > 0.5  # the exact per-row path is exercised
        background = rng.normal(size=(40_000, d)) * 0.4
        ideal = _ideal_votes(ties, index)
        alone = np.array([vote.vote_labels(ties[i : i + 1], index)[0] for i in range(len(ties))])
        np.testing.assert_array_equal(alone, ideal)
        for i in range(0, len(ties), 6):  # blocks of 7: one tie row among 6 random ones
            block = np.concatenate([background[i : i + 6], ties[i : i + 1]])
            perm = rng.permutation(7)
            got = vote.vote_labels(block[perm], index)
            assert got[np.argsort(perm)][6] == ideal[i]
        big = np.concatenate([background, ties])
        perm = rng.permutation(len(big))
        got = vote.vote_labels(big[perm], index)[np.argsort(perm)]
        np.testing.assert_array_equal(got[-len(ties) :], ideal)
        np.testing.assert_array_equal(got[:2000], _ideal_votes(background[:2000], index))


@pytest.mark.parametrize("d", [5, 16])
def test_rows_at_far_mutants_still_vote_for_them(d: int) -> None:
    # An anchor cell's far mutants are scored only within the triangle inequality's reach of
    # its rows: rows sitting on (or just beside) far mutants, on anchors and halfway between
    # must still get their ideal votes, whatever rows share their tiles.
    rng = np.random.default_rng(90 + d)
    evolved, index = _six_groups(rng, d)
    assert index.packed is not None and index.everyone is None
    far = group_cores(evolved, SIX_GROUPS)[1]  # the far mutants, every cell's tail
    assert far.size >= 5
    on_far = evolved[far] + rng.normal(size=(len(far), d)) * 1e-7
    halfway = 0.5 * (evolved[far] + evolved[rng.integers(0, 6, len(far))])
    rows = np.concatenate([on_far, halfway, evolved[:6], rng.normal(size=(5000, d)) * 0.4])
    perm = rng.permutation(len(rows))
    got = vote.vote_labels(rows[perm], index)[np.argsort(perm)]
    np.testing.assert_array_equal(got, _ideal_votes(rows, index))
    exact = _exact_sq(on_far, evolved[far]).argmin(axis=1)
    assert (got[: len(far)] == far[exact]).mean() > 0.9  # most vote for the mutant they sit on


@pytest.mark.parametrize("d", [7, 12])
def test_votes_equal_the_exact_argmin_over_the_searched_set(d: int) -> None:
    rng = np.random.default_rng(50 + d)
    for index in [*_index_cases(rng, d), vote_cells.vote_index(sphere_packing(500, d, 1.0, rng))]:
        points = rng.normal(size=(1500, d)) * 0.4
        _, flagged = vote._fast_block(points, index)
        assert flagged.mean() < 0.05  # random rows are rarely near a tie
        np.testing.assert_array_equal(vote.vote_labels(points, index), _ideal_votes(points, index))


def test_coincident_candidates_vote_for_the_lowest_index() -> None:
    rng = np.random.default_rng(60)
    candidates = _evolved(rng, 5, 40, 12)
    candidates[30] = candidates[20]  # same core cell? whichever: duplicates tie exactly
    index = vote_cells.vote_index(candidates, nearest.GroupLayout(5, 40))
    points = candidates[[20, 30]] + 0.0
    labels = vote.vote_labels(points, index)
    np.testing.assert_array_equal(labels, _ideal_votes(points, index))
    assert labels[0] == labels[1] <= 20


@pytest.mark.parametrize("scale", [1.0, 1e-150, 1e150, 1e200])
def test_the_exact_re_decision_is_the_lowest_index_minimiser(scale: float) -> None:
    # `_ideal_in` (compiled) must give the lowest-index minimiser of `_ordered_sq` over all
    # members, with duplicates, near ties and magnitudes whose squares underflow or overflow.
    rng = np.random.default_rng(11)
    d = 16
    base = rng.normal(size=(300, d))
    members_points = np.concatenate([base, base[:50], base[:50] + 1e-12, base[:20] * (1 + 1e-15)])
    rows = np.concatenate(
        [base[:100] + 1e-9 * rng.normal(size=(100, d)), rng.normal(size=(200, d))]
    )
    members_points, rows = members_points * scale, rows * scale
    members = np.arange(len(members_points))
    best = np.full(len(rows), np.inf)
    best_index = np.full(len(rows), len(members), dtype=np.intp)
    vote._ideal_in(rows, members_points, members, best, best_index, np.arange(len(rows)))
    with np.errstate(over="ignore", under="ignore"):
        full = vote._ordered_sq(rows, members_points)
    np.testing.assert_array_equal(best_index, full.argmin(axis=1))
    finite = np.isfinite(full.min(axis=1))
    np.testing.assert_array_equal(best[finite], full.min(axis=1)[finite])


@pytest.mark.parametrize("n_members", [1, 2, 3, 16, 257])
def test_merge_top2_equals_argmin_and_min_of_the_rest(n_members: int) -> None:
    from privclust.clustering.evolution.kernels import merge_top2

    rng = np.random.default_rng(n_members)
    m = 300
    first = rng.normal(size=(n_members, m)).astype(np.float32)
    then = rng.normal(size=(n_members, m)).astype(np.float32)
    first[:, :40] = rng.integers(0, 3, size=(n_members, 40))  # exact ties, within and across
    then[:, 20:60] = rng.integers(0, 3, size=(n_members, 40))
    members = np.arange(n_members, dtype=np.int32) * 7
    best = np.full(m, np.inf, dtype=np.float32)
    second = best.copy()
    index = np.full(m, -1, dtype=np.int32)
    merge_top2(first, members, best, second, index)
    merge_top2(then, members + 1, best, second, index)

    both = np.concatenate([first, then])  # scored in this order
    labels = np.concatenate([members, members + 1])
    arg = both.argmin(axis=0)  # the first minimum: strict improvement keeps the earlier one
    np.testing.assert_array_equal(best, both.min(axis=0))
    np.testing.assert_array_equal(index, labels[arg])
    rest = both.copy()
    rest[arg, np.arange(m)] = np.inf
    np.testing.assert_array_equal(second, rest.min(axis=0))  # a repeated minimum is the second


@pytest.mark.parametrize(("n_centres", "probes"), [(2, 1), (16, 8), (31, 8), (9, 8)])
def test_smallest_scores_select_what_argpartition_selects(n_centres: int, probes: int) -> None:
    # The inverted file's probes: the same set of centres, and the same scores at the edge, as
    # numpy's argpartition, ties included (where either may take either of two equal scores,
    # the edge gap is 0 and the caller re-decides the row).
    from privclust.clustering.evolution.kernels import smallest_scores

    rng = np.random.default_rng(n_centres)
    rows = 500
    scores = rng.normal(size=(n_centres, rows)).astype(np.float32)
    scores[:, :100] = rng.integers(0, 4, size=(n_centres, 100))  # exact ties
    nearest_ = np.empty((rows, probes), dtype=np.intp)
    edge = np.empty((rows, 2), dtype=np.float32)
    smallest_scores(scores, probes, nearest_, edge)
    by_row = scores.T
    part = np.argpartition(by_row, [probes - 1, probes], axis=1)
    expected_edge = np.take_along_axis(by_row, part[:, probes - 1 : probes + 1], axis=1)
    np.testing.assert_array_equal(edge, expected_edge)
    chosen = np.take_along_axis(by_row, nearest_, axis=1)
    assert (np.diff(chosen, axis=1) >= 0).all()  # in increasing score
    np.testing.assert_array_equal(chosen[:, -1], edge[:, 0])
    untied = edge[:, 1] > edge[:, 0]
    assert untied.sum() > 300
    for r in np.flatnonzero(untied):
        assert set(nearest_[r]) == set(part[r, :probes])


def test_rows_whose_float32_scores_would_overflow_are_decided_exactly() -> None:
    # Candidates within 1e-42 of the origin: scaled by their largest norm, rows of norm ~1 are
    # ~1e42 in score units, beyond float32 (3.4e38). Such rows (above 2^100) take the exact
    # float64 path, so the vote is still the exact argmin over the searched set.
    rng = np.random.default_rng(70)
    candidates = _evolved(rng, 4, 50, 12) * 1e-42
    index = vote_cells.vote_index(candidates, nearest.GroupLayout(4, 50))
    points = rng.normal(size=(200, 12))
    points[:5] *= 1e-42  # rows at the candidates' scale take the float32 path
    _, flagged = vote._fast_block(points, index)
    assert flagged[5:].all() and not flagged[:5].all()
    np.testing.assert_array_equal(vote.vote_labels(points, index), _ideal_votes(points, index))


def test_rows_beyond_float32_take_the_exact_path_through_an_inverted_file_too() -> None:
    rng = np.random.default_rng(71)
    index = vote_cells.vote_index(sphere_packing(3000, 12, 1.0, rng) * 1e-42)
    assert index.centres is not None and index.probes > 1
    points = rng.normal(size=(100, 12))
    np.testing.assert_array_equal(vote.vote_labels(points, index), _ideal_votes(points, index))


def test_the_compiled_distance_is_ordered_sq_bit_for_bit() -> None:
    # One candidate at a time, the running best is that candidate's distance itself: every
    # entry must equal `_ordered_sq`'s (an FMA or a reordered sum would change low bits).
    from privclust.clustering.evolution.kernels import ordered_best

    rng = np.random.default_rng(12)
    rows = rng.normal(size=(400, 13)) * 10.0 ** rng.integers(-3, 4, size=(400, 1))
    candidates = rng.normal(size=(60, 13))
    expected = vote._ordered_sq(rows, candidates)
    for j in range(len(candidates)):
        best = np.full(len(rows), np.inf)
        index = np.full(len(rows), -1, dtype=np.int64)
        ordered_best(
            rows, np.ascontiguousarray(candidates[j : j + 1].T), np.array([j]), best, index
        )
        np.testing.assert_array_equal(best, expected[:, j])
        assert (index == j).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_vote_rows_are_scaled_once_and_their_norms_summed_in_order(dtype: type) -> None:
    # The compiled preparation of a block: each coordinate scaled in float64 and rounded once
    # to float32 (the rounding `vote._vote_window` allows for), a row of ones, and each norm the
    # float64 squares summed in coordinate order; a row beyond float32 is infinite there, and
    # its norm beyond _F32_SAFE_NORM, so the vote decides it exactly.
    from privclust.clustering.evolution.kernels import scaled_rows

    rng = np.random.default_rng(13)
    rows = (rng.normal(size=(300, 11)) * 10.0 ** rng.integers(-3, 4, size=(300, 1))).astype(dtype)
    if dtype == np.float64:
        rows[7, 3] = 1e300
    inv_scale = 1.0 / 3.7
    augmented = np.empty((300, 12), dtype=np.float32)
    norms = np.empty(300)
    with np.errstate(over="ignore"):
        scaled_rows(rows, inv_scale, augmented, norms)
        scaled = rows.astype(np.float64) * inv_scale
        np.testing.assert_array_equal(augmented[:, :-1], scaled.astype(np.float32))
        expected = scaled[:, 0] * scaled[:, 0]
        for col in range(1, 11):
            expected = expected + scaled[:, col] * scaled[:, col]
    assert (augmented[:, -1] == 1.0).all()
    np.testing.assert_array_equal(norms, np.sqrt(expected))
    if dtype == np.float64:
        assert np.isinf(augmented[7, 3]) and not norms[7] <= vote._F32_SAFE_NORM


@pytest.mark.parametrize("tile_elements", [1, 7, 64, 1 << 18])
@pytest.mark.parametrize("far", ["none", "out of reach", "within reach"])
def test_the_cell_search_merges_each_row_against_its_own_cell(tile_elements: int, far: str) -> None:
    # Small integers and integer weights: every score is exact in float32 in any summation
    # order, so the search's best, second and best index must be those computed here, cell by
    # cell, over rows listed in any order and tiles of any size. The last cell may have far
    # members, out of reach of every row (none may be scored: they would win every row) or
    # within it (all are scored).
    from privclust.clustering.evolution.kernels import search_cells

    rng = np.random.default_rng(15)
    n, d = 90, 5
    rows = np.ones((n, d + 1), dtype=np.float32)
    rows[:, :d] = rng.integers(-8, 9, size=(n, d))
    weights = rng.integers(-4, 5, size=(14, d + 1)).astype(np.float32)
    weights[11:, -1] = -1000.0  # far members that would beat everything
    members = (np.arange(14) * 3 + 1).astype(np.int32)
    cell_of_row = rng.integers(0, 3, size=n)
    cell_of_row[cell_of_row == 1] = 2
    order = rng.permutation(n)
    order = order[np.argsort(cell_of_row[order], kind="stable")]
    bounds = np.searchsorted(cell_of_row[order], np.arange(4))
    offsets = np.array([0, 3, 3, 11 if far == "none" else 14])  # the middle cell is empty
    far_starts = np.array([3, 3, 11])
    reach = np.zeros(14)
    if far == "out of reach":
        reach[11:] = [1e9, 2e9, 3e9]  # beyond any row's reach plus its best's distance
    best = np.full(n, np.inf, dtype=np.float32)
    second = best.copy()
    best_index = np.full(n, -1, dtype=np.int32)
    small = np.zeros(n)
    search_cells(
        rows,
        order,
        bounds,
        weights,
        offsets,
        members,
        far_starts,
        reach,
        small,  # each row's reach: 0
        np.full(n, 1e4),  # slack: a best's distance at most sqrt(2 score + 1e4)
        tile_elements,
        best,
        second,
        best_index,
    )

    scores = weights @ rows.T  # exact: small integers
    ends = [3, 3, 14 if far == "within reach" else 11]
    for r in range(n):
        c = cell_of_row[r]
        cell = slice(offsets[c], ends[c])
        mine = scores[cell, r]
        first = int(np.argmin(mine))
        assert best[r] == mine[first] and best_index[r] == members[cell][first]
        rest = np.delete(mine, first)
        assert second[r] == (rest.min() if rest.size else np.inf)


@pytest.mark.parametrize("block", [nearest.PAIR_BLOCK_ELEMENTS, 64, 1])
def test_nearest_other_distances_in_blocks_match_the_full_matrix(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The groups' cores (and pe-lloyd's step radii) come from these gaps: blocking them to keep
    # memory O(block) for large k must not move a single bit.
    monkeypatch.setattr(nearest, "PAIR_BLOCK_ELEMENTS", block)
    rng = np.random.default_rng(0)
    for n, d in [(2, 2), (50, 16), (300, 64)]:
        points = rng.normal(size=(n, d))
        points[-1] = points[0]  # a duplicate: its nearest other is at distance 0
        full = np.sqrt(np.sum((points[:, None, :] - points[None, :, :]) ** 2, axis=2))
        np.fill_diagonal(full, np.inf)
        got = nearest.nearest_other_distances(points)
        assert np.array_equal(got, full.min(axis=1))
        assert got[0] == 0.0 and got[-1] == 0.0
    assert np.array_equal(nearest.nearest_other_distances(np.zeros((1, 3))), [np.inf])
