"""Unit tests of the PE-means building blocks against docs/algorithms.md section 4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gamma

from privclust.clustering.data.domain import prepare_rows
from privclust.clustering.evolution import histogram, nearest, packing, selection
from privclust.clustering.evolution.variation import (
    LEVY_BETA,
    levy_steps,
    levy_variations,
    mantegna_sigma_u,
)

# ---------------------------------------------------------------------------------------------
# Levy variation (Mantegna)


def test_mantegna_sigma_u_matches_the_formula_and_known_values() -> None:
    beta = 1.75
    expected = (
        gamma(1 + beta)
        * math.sin(math.pi * beta / 2)
        / (gamma((1 + beta) / 2) * beta * 2 ** ((beta - 1) / 2))
    ) ** (1 / beta)
    assert mantegna_sigma_u() == pytest.approx(expected, rel=1e-14)
    assert LEVY_BETA == 1.75
    # beta = 1: every factor is 1. beta = 1.5: the value quoted throughout the cuckoo-search
    # literature, 0.6966.
    assert mantegna_sigma_u(1.0) == pytest.approx(1.0, rel=1e-14)
    assert mantegna_sigma_u(1.5) == pytest.approx(0.6966, abs=5e-5)


def test_levy_steps_have_tail_index_beta() -> None:
    # u / |v|^(1/beta) has P(|step| > t) ~ C t^-beta. The Hill estimator on the top 0.5% of
    # 2e6 draws has standard error ~ beta / sqrt(10^4) ~ 0.02 plus a small bias; the 0.15 band
    # is over 5 standard errors (false-failure rate < 1e-6 with this fixed seed anyway).
    steps = np.abs(levy_steps(np.random.default_rng(7), 2_000_000, 1).ravel())
    top = np.sort(steps)[-10_000:]
    hill = 1.0 / np.mean(np.log(top / top[0]))
    assert hill == pytest.approx(1.75, abs=0.15)


def test_levy_variations_are_grouped_by_centre_and_stay_in_the_ball() -> None:
    rng = np.random.default_rng(3)
    centres = np.array([[0.5, 0.0, 0.0], [-0.99, 0.0, 0.0]])
    mutants = levy_variations(centres, 500, 2.0, rng)
    assert mutants.shape == (1000, 3)
    assert np.all(np.linalg.norm(mutants, axis=1) <= 2.0 * (1 + 1e-12))
    # gamma * R = 0.02: the median displacement is of that order, and mutant i*L + l belongs
    # to centre i.
    for i, centre in enumerate(centres):
        moved = np.linalg.norm(mutants[i * 500 : (i + 1) * 500] - centre, axis=1)
        assert 0.005 < np.median(moved) < 0.1
    # Heavy tail: some mutants jump far and are put back on the sphere of radius R.
    norms = np.linalg.norm(levy_variations(np.zeros((1, 3)), 20_000, 1.0, rng), axis=1)
    assert np.isclose(norms, 1.0).any()


# ---------------------------------------------------------------------------------------------
# Sphere packing


@pytest.mark.parametrize(("n", "d"), [(1, 3), (33, 4), (500, 2), (600, 16), (300, 40)])
def test_sphere_packing_spacing(n: int, d: int) -> None:
    radius = 3.0
    points, a = packing.pack_ball(n, d, radius, np.random.default_rng(n + d))
    assert points.shape == (n, d)
    # a is R/2 halved some number of times.
    halvings = math.log2(radius / 2 / a)
    assert halvings == pytest.approx(round(halvings)) and halvings >= 0
    assert np.linalg.norm(points, axis=1).max() <= (radius - a) * (1 + 1e-12)
    if n > 1:
        diff = points[:, None, :] - points[None, :, :]
        dist = np.sqrt((diff**2).sum(axis=2))
        np.fill_diagonal(dist, np.inf)
        assert dist.min() >= 2 * a * (1 - 1e-12)


def _sequential_attempt(stream: np.ndarray, n: int, a: float, limit: int) -> np.ndarray | None:
    """The rule as written: one draw at a time from `stream`."""
    accepted: list[np.ndarray] = []
    run = 0
    for point in stream:
        if all(np.linalg.norm(point - q) >= 2 * a for q in accepted):
            accepted.append(point)
            run = 0
            if len(accepted) == n:
                return np.array(accepted)
        else:
            run += 1
            if run == limit:
                return None
    raise AssertionError("stream too short")


@pytest.mark.parametrize(
    ("n", "d", "a", "fits"),
    [(100, 2, 0.05, True), (200, 2, 0.05, False), (200, 3, 0.1, True), (400, 3, 0.125, False)],
)
def test_batched_packing_replays_the_sequential_rule(
    monkeypatch: pytest.MonkeyPatch, n: int, d: int, a: float, fits: bool
) -> None:
    # The same stream of draws must give the same outcome (points, or failure after 20
    # consecutive rejections) as drawing one point at a time. Whether n points fit was found
    # with the sequential rule on this seeded stream; both outcomes are exercised.
    stream = packing.uniform_in_ball(np.random.default_rng(5), 200_000, d, 1.0)
    position = 0

    def next_draws(rng: np.random.Generator, count: int, dim: int, radius: float) -> np.ndarray:
        nonlocal position
        out = stream[position : position + count] * radius
        position += count
        return out

    monkeypatch.setattr(packing, "uniform_in_ball", next_draws)
    batched = packing._attempt(n, d, 1.0 + a, a, np.random.default_rng(0), 20)
    expected = _sequential_attempt(stream, n, a, 20)
    if expected is None:
        assert batched is None
    else:
        assert batched is not None
        np.testing.assert_array_equal(batched, expected)
    assert (expected is not None) == fits


# ---------------------------------------------------------------------------------------------
# Histogram post-processing and adaptive L


def test_postprocess_keeps_the_smallest_top_prefix_reaching_n() -> None:
    noisy = np.array([5, -1, 3, 10, 1])
    out = histogram.postprocess_votes(noisy, 12)
    np.testing.assert_array_equal(out, [5, 0, 0, 10, 0])
    assert out.dtype == np.int64
    # Reaching N~ exactly is enough.
    np.testing.assert_array_equal(histogram.postprocess_votes(np.array([6, 6, 1]), 12), [6, 6, 0])
    # Never reaching N~: keep every positive bin, zero the negative ones.
    np.testing.assert_array_equal(histogram.postprocess_votes(np.array([3, -2, 1]), 10), [3, 0, 1])
    # A noisy count N~ <= 0 keeps just the largest positive bin.
    np.testing.assert_array_equal(histogram.postprocess_votes(np.array([3, 4, 1]), -5), [0, 4, 0])


def test_postprocess_takes_only_integer_releases() -> None:
    # A float histogram would carry noise low bits into the weights: refused, not truncated.
    with pytest.raises(TypeError):
        histogram.postprocess_votes(np.array([1.5, 2.0]), 2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-50, 200), min_size=1, max_size=40),
    st.integers(1, 2000),
)
def test_postprocess_properties(values: list[int], n: int) -> None:
    noisy = np.array(values)
    out = histogram.postprocess_votes(noisy, n)
    kept = out != 0
    assert np.all(out[kept] == noisy[kept]) and np.all(out >= 0)
    if np.sum(noisy[noisy > 0]) >= n:
        # The kept bins are the largest ones, they reach N, and dropping the smallest of them
        # would not.
        assert out.sum() >= n
        assert out.sum() - out[kept].min() < n
        assert noisy[kept].min() >= noisy[~kept].max(initial=np.iinfo(np.int64).min)
    else:
        np.testing.assert_array_equal(out, np.where(noisy > 0, noisy, 0))


def test_adaptive_variations_halves_on_low_signal_to_noise() -> None:
    sigma, population = 10.0, 100
    # Energy 100 * 10^2 = 10,000 is the threshold: just below halves, at it keeps.
    weak = np.full(100, 9.99)
    strong = np.full(100, 10.0)
    assert histogram.adapt_variations(250, weak, sigma, population) == 125
    assert histogram.adapt_variations(250, strong, sigma, population) == 250
    assert histogram.adapt_variations(9, weak, sigma, population) == 4
    assert histogram.adapt_variations(4, weak, sigma, population) == 4
    # An explicitly small L is never raised to 4.
    assert histogram.adapt_variations(2, weak, sigma, population) == 2
    # The denominator is the population size, not N: same bins, bigger population -> halve.
    assert histogram.adapt_variations(250, strong, sigma, 101) == 125


# ---------------------------------------------------------------------------------------------
# Selection


def test_selection_uses_only_positive_weight_candidates() -> None:
    rng = np.random.default_rng(1)
    candidates = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0], [100.0, 100.0]])
    weights = np.array([10.0, 10.0, 20.0, 20.0, 0.0])
    centres = selection.select_centres(candidates, weights, 2, None, rng)
    got = sorted(map(tuple, np.round(centres, 6)))
    assert got == [(0.05, 0.0), (5.05, 5.0)]


def test_selection_with_fewer_positive_candidates_than_k() -> None:
    rng = np.random.default_rng(2)
    candidates = rng.normal(size=(50, 3))
    weights = np.zeros(50)
    weights[[4, 9]] = 7.0
    previous = rng.normal(size=(5, 3))
    assert selection.select_centres(candidates, weights, 5, previous, rng) is previous
    first = selection.select_centres(candidates, weights, 5, None, rng)
    assert first.shape == (5, 3)
    assert {4, 9} <= {int(np.flatnonzero((candidates == c).all(1))[0]) for c in first}


# ---------------------------------------------------------------------------------------------
# Nearest-candidate search


def _brute_force(points: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    sq = ((points[:, None, :] - candidates[None, :, :]) ** 2).sum(axis=2)
    return sq.argmin(axis=1)  # lowest index among exact ties


@pytest.mark.parametrize("d", [2, 8, 9, 16, 64])
def test_nearest_candidates_is_exact_for_every_backend(d: int) -> None:
    rng = np.random.default_rng(d)
    k, per = 6, 40
    anchors = rng.normal(size=(k, d)) * 0.5
    candidates = np.concatenate([anchors, levy_variations(anchors, per, 1.0, rng)])
    # Rows near the anchors, between them, and far outside.
    points = np.concatenate(
        [
            anchors[rng.integers(k, size=1500)] + rng.normal(scale=0.05, size=(1500, d)),
            rng.normal(size=(500, d)),
            rng.normal(size=(20, d)) * 20,
        ]
    )
    expected = _brute_force(points, candidates)
    layout = nearest.GroupLayout(anchors=k, per_anchor=per)
    np.testing.assert_array_equal(nearest.nearest_candidates(points, candidates, layout), expected)
    np.testing.assert_array_equal(nearest._grouped_search(points, candidates, layout), expected)
    np.testing.assert_array_equal(nearest.nearest_candidates(points, candidates), expected)
    np.testing.assert_array_equal(nearest._blas_search(points, candidates), expected)
    np.testing.assert_array_equal(nearest._tree_search(points, candidates), expected)


def test_exact_ties_go_to_the_lowest_index_whatever_the_other_rows() -> None:
    # Candidates 1 and 3 coincide, and the lattice makes many rows exactly equidistant from two
    # candidates. A row's vote must not depend on which other rows are searched with it.
    grid = np.array([[x, y] for x in range(-3, 4) for y in range(-3, 4)], dtype=float) / 4
    candidates = np.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.5], [0.5, 0.0], [-0.5, -0.5]])
    expected = _brute_force(grid, candidates)
    assert 3 not in expected
    for search in (nearest._blas_search, nearest._tree_search):
        together = search(grid, candidates)
        alone = np.array([search(grid[i : i + 1], candidates)[0] for i in range(len(grid))])
        np.testing.assert_array_equal(together, expected)
        np.testing.assert_array_equal(alone, expected)


def test_grouped_search_breaks_exact_ties_across_groups_by_lowest_index() -> None:
    # Two anchors with one mutant each; rows on the bisector x = 0.5 are exactly equidistant
    # from candidates of both groups.
    candidates = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.5], [1.0, 0.5]])
    layout = nearest.GroupLayout(anchors=2, per_anchor=1)
    rows = np.array([[0.5, y] for y in np.linspace(-1, 1.5, 11)] + [[0.2, 0.3], [0.9, 0.6]])
    expected = _brute_force(rows, candidates)
    np.testing.assert_array_equal(nearest._grouped_search(rows, candidates, layout), expected)
    assert set(expected[:11]) <= {0, 2}


# ---------------------------------------------------------------------------------------------
# Clipping into the declared domain


def test_rows_are_centred_and_clipped_into_the_ball_without_touching_x() -> None:
    X = np.array([[1.0, 1.0], [1.0, 11.0], [-20.0, 1.0], [1.0, 1.5]])
    X.flags.writeable = False
    points, centre = prepare_rows(X, 2.0, [1.0, 1.0])
    np.testing.assert_array_equal(centre, [1.0, 1.0])
    np.testing.assert_array_equal(points[0], [0.0, 0.0])
    np.testing.assert_array_equal(points[3], [0.0, 0.5])  # inside: unchanged
    norms = np.linalg.norm(points, axis=1)
    assert np.all(norms <= 2.0)
    assert norms[1] == pytest.approx(2.0) and norms[2] == pytest.approx(2.0)
    np.testing.assert_allclose(points[1], [0.0, 2.0])
    np.testing.assert_allclose(points[2], [-2.0, 0.0])


def test_prepare_rows_is_total_on_a_domain_far_from_the_origin() -> None:
    # A domain centred at -1e308 and a row at +1.5e308: centring the raw row would overflow.
    # Box-clipping first keeps every step finite, whatever the row, so one row can never make
    # a job fail (it used to: "X has values too large to centre on the domain").
    X = np.array([[1.5e308, 0.0], [-1e308, 0.5], [-1e308 + 1e292, -0.2]])
    points, _ = prepare_rows(X, 1.0, np.array([-1e308, 0.0]))
    assert np.isfinite(points).all()
    assert np.all(np.linalg.norm(points, axis=1) <= 1.0)
    # Tiny and huge radii: norms neither underflow nor overflow.
    for radius in (1e-200, 1e200):
        rows = np.array([[3 * radius, 4 * radius], [0.1 * radius, 0.0]])
        clipped, _ = prepare_rows(rows, radius, None)
        norms = np.linalg.norm(clipped / radius, axis=1)
        assert norms[0] == pytest.approx(1.0) and norms[0] <= 1.0
        assert norms[1] == pytest.approx(0.1)


def test_clipping_is_radial_even_far_outside_the_box() -> None:
    # x <- c + (x - c) * R / ||x - c||: the direction from the centre is kept (a box clip first
    # would turn (10, 1) into the direction (1, 1)).
    c = np.array([2.0, -1.0])
    X = np.array([[12.0, 0.0], [2.5, -1.0], [2.0 - 3e300, -1.0 + 4e300]])
    points, _ = prepare_rows(X, 1.0, c)
    np.testing.assert_allclose(points[0], np.array([10.0, 1.0]) / np.hypot(10.0, 1.0))
    np.testing.assert_array_equal(points[1], [0.5, 0.0])  # inside: untouched
    np.testing.assert_allclose(points[2], [-0.6, 0.8])
