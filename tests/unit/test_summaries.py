"""Private summaries, the elbow rule and the library sweep: their arithmetic, their calibration
(every release composes to exactly the job's mu) and a seeded check of a sweep's losses."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from privclust.clustering import ClusteringInputError, cluster, plan_run, suggest_k, sweep
from privclust.clustering.data import rows
from privclust.clustering.outputs import summaries as sm
from privclust.clustering.run.options import SUMMARY_MU_FRACTION, SWEEP_SUMMARY_FRACTION
from privclust.clustering.run.schedule import (
    LOSS_GRID_BITS,
    SUMMARY_LOSS_SHARE,
    loss_sensitivity,
    summary_sigmas,
)
from privclust.clustering.sweeps import plan_sweep
from privclust.privacy.gdp import equal_share, mu_from_epsilon_delta, remaining_after
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import ReleaseLog
from tests.support.data import blobs
from tests.support.metrics import kmeans_loss

# ---------------------------------------------------------------------------------------------
# Exact statistics and their grid


def test_exact_summary_counts_nearest_rows_and_clips_the_loss() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(-3.0, 3.0, size=(5000, 3))  # many rows outside the ball of radius 2
    centres = np.array([[0.5, 0.0, 0.0], [-1.0, 1.0, 0.0], [0.0, 0.0, 1.9]])
    exact = sm.exact_summary(X, centres, radius=2.0, center=np.zeros(3))
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    clipped = X * np.minimum(1.0, 2.0 / norms)
    sq = ((clipped[:, None, :] - centres[None]) ** 2).sum(axis=2)
    assert exact.counts.tolist() == np.bincount(sq.argmin(axis=1), minlength=3).tolist()
    # The clip is the centres' covering bound of the ball (public), below the worst case (2R)^2.
    assert exact.bound == sm.loss_bound(centres, 2.0) < 16.0
    assert sq.min(axis=1).max() <= exact.bound
    expected_units = np.rint(sq.min(axis=1) / exact.bound * 2**LOSS_GRID_BITS).sum()
    # Each row's term is rounded on the grid: the sum differs by far less than a row's term.
    assert abs(exact.loss_units - expected_units) <= 5000
    assert exact.loss_units == pytest.approx(expected_units, rel=1e-6)


def test_one_row_moves_the_loss_sum_by_at_most_the_sensitivity() -> None:
    # The farthest possible row (2R from its centre, which sits on the sphere, so the bound is
    # (2R)^2) adds exactly 2^G grid units, never more.
    centres = np.array([[1.0, 0.0]])
    base = sm.exact_summary(np.array([[1.0, 0.0]]), centres, radius=1.0)
    far = sm.exact_summary(np.array([[1.0, 0.0], [-50.0, 0.0]]), centres, radius=1.0)
    assert far.loss_units - base.loss_units == 2**LOSS_GRID_BITS == loss_sensitivity()
    assert far.counts.tolist() == [2]
    assert far.bound == 4.0


def _farthest_point_found(centres: np.ndarray, radius: float, seed: int) -> float:
    """The largest min_j ||x - c_j||^2 that projected ascent from 300 random starts on the
    sphere of `radius` finds (a lower bound on the true maximum over the ball)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, centres.shape[1]))
    x *= radius / np.linalg.norm(x, axis=1, keepdims=True)
    for _ in range(300):
        sq = ((x[:, None, :] - centres[None]) ** 2).sum(axis=2)
        x = x + 0.05 * (x - centres[sq.argmin(axis=1)])
        x *= radius / np.linalg.norm(x, axis=1, keepdims=True)
    return float(((x[:, None, :] - centres[None]) ** 2).sum(axis=2).min(axis=1).max())


@pytest.mark.parametrize(
    ("d", "k", "seed", "tight"),
    [(2, 1, 0, True), (2, 5, 1, False), (4, 16, 2, False), (16, 16, 3, True), (64, 32, 4, True)],
)
def test_the_loss_bound_covers_the_whole_ball(d: int, k: int, seed: int, tight: bool) -> None:
    rng = np.random.default_rng(seed)
    radius = 3.0
    centres = rng.uniform(-1.0, 1.0, size=(k, d))
    centres *= rng.uniform(0.0, radius, size=(k, 1)) / np.linalg.norm(centres, axis=1)[:, None]
    bound = sm.loss_bound(centres, radius)
    found = _farthest_point_found(centres, radius, seed)
    # Valid: no point of the ball is farther from its nearest centre, and never above the worst
    # case (2R)^2. The relaxation never goes below R^2: where many centres cover a
    # low-dimensional ball the true radius is smaller; with d >= k, or one centre, it is tight.
    assert found <= bound <= 4 * radius**2
    assert bound >= radius**2
    if tight:
        assert bound <= 1.1 * found
    # The grid: a whole number of 2^-10 R^2.
    assert (bound / radius**2 / sm.LOSS_BOUND_GRID).is_integer()


def test_the_loss_bound_in_special_cases() -> None:
    # One centre at the domain's centre: every row is within R, and the bound is R^2 up to the
    # grid step that the safety margin rounds up to.
    assert sm.loss_bound(np.zeros((1, 3)), 2.0) == pytest.approx(4.0, rel=2 * sm.LOSS_BOUND_GRID)
    # Centres around the domain's centre: c(lam) = 0 is reachable, so the bound is below the
    # best single centre's (R + ||c||)^2 = 2.25 R^2.
    square = 0.5 * np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    assert sm.loss_bound(square, 1.0) <= 1.25 + sm.LOSS_BOUND_GRID
    # Scale: the bound is in units of R^2.
    assert sm.loss_bound(8 * square, 8.0) == 64 * sm.loss_bound(square, 1.0)
    # Centres that are not finite give no information: the worst case.
    assert sm.loss_bound(np.array([[np.nan, 0.0]]), 1.0) == 4.0


def test_labels_come_in_blocks_and_match_the_nearest_centre(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows, "STREAM_BLOCK_ROWS", 100)
    X = blobs(1050, 4, 3)
    centres = np.array([[0.3, 0.3, 0.3, 0.3], [-0.3, 0.0, 0.2, 0.1], [0.0, -0.4, 0.0, 0.0]])
    blocks = list(sm.nearest_centre_blocks(X, centres, radius=1.5))
    assert [len(b) for b in blocks] == [100] * 10 + [50]
    labels = np.concatenate(blocks)
    assert labels.dtype == np.int32
    brute = ((X[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    assert (labels == brute).all()


# ---------------------------------------------------------------------------------------------
# Releases and calibration


def test_release_normalises_by_the_public_count_and_states_its_se() -> None:
    exact = sm.ExactSummary(
        counts=np.array([500, 0, 300]), loss_units=2**LOSS_GRID_BITS * 40, bound=4.0
    )
    rng = np.random.default_rng(0)
    released = sm.release_summary(exact, mu=0.5, relation="add-remove", n_public=1000, rng=rng)
    sizes_sigma, loss_sigma = summary_sigmas(0.5)
    assert released.sizes.dtype == np.int64 and (released.sizes >= 0).all()
    # B * 40 / N~ = 0.16 with B = 4, N~ = 1000; SE = B * sigma_loss / N~.
    assert released.loss_se == pytest.approx(4.0 * loss_sigma / 1000, rel=1e-15)
    assert abs(released.loss - 0.16) < 6 * released.loss_se
    # GDP: the two releases compose to at most the summaries' mu, and the loss gets its share.
    assert math.hypot(1 / sizes_sigma, 1 / loss_sigma) <= 0.5
    assert math.hypot(1 / sizes_sigma, 1 / loss_sigma) == pytest.approx(0.5, rel=1e-12)
    assert 1 / loss_sigma == pytest.approx(math.sqrt(SUMMARY_LOSS_SHARE) * 0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("algorithm", "relation", "count_sensitivity"),
    [
        ("pe-means", "add-remove", 1.0),
        ("hdpe-means", "add-remove", 1.0),
        ("pe-means", "replace-one", math.sqrt(2.0)),
        ("fastlloyd", "add-remove", 1.0),
    ],
)
def test_a_summarised_job_spends_exactly_its_mu(
    log: ReleaseLog, algorithm: str, relation: str, count_sensitivity: float
) -> None:
    d = 40 if algorithm == "hdpe-means" else 3
    X = blobs(800, d, 3)
    epsilon, delta = 2.0, 1e-6
    n_public = None if relation == "replace-one" else 790
    result = cluster(
        X,
        3,
        algorithm=algorithm,
        radius=1.5,
        epsilon=epsilon,
        delta=delta,
        n_public=n_public,
        relation=relation,
        summaries=True,
        rng=np.random.default_rng(5),
    )
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert (result.mu, result.epsilon, result.delta) == (mu, epsilon, delta)
    assert result.summary_mu == pytest.approx(SUMMARY_MU_FRACTION * mu, rel=1e-15)
    # The planner prices exactly this run (the service charges the plan).
    plan = plan_run(
        800 if n_public is None else n_public,
        d,
        3,
        algorithm=algorithm,
        epsilon=epsilon,
        delta=delta,
        relation=relation,
        summaries=True,
    )
    assert (plan.releases, plan.sigma, plan.summary_mu) == (
        result.releases,
        result.sigma,
        result.summary_mu,
    )
    assert plan.iterations == result.iterations
    # The centres' releases, then the sizes and the loss sum with their own sigmas.
    sizes_sigma, loss_sigma = summary_sigmas(plan.summary_mu)
    if algorithm != "hdpe-means":  # HDPE's final sums are one call priced as several releases
        assert len(log.calls) == result.releases + 2
    assert log.calls[-2] == (count_sensitivity, sizes_sigma, (3,))
    assert log.calls[-1] == (float(2**LOSS_GRID_BITS), loss_sigma, (1,))
    # Each call's mu is (true sensitivity) / (its noise std); HDPE-means's final sums are
    # released with their sensitivity divided by sqrt(w), priced as w = T releases.
    true = [s for s, _, _ in log.calls]
    if algorithm == "hdpe-means":
        true[-4] *= math.sqrt(result.iterations)
    composed = math.sqrt(
        sum((t / (s * sig)) ** 2 for (s, sig, _), t in zip(log.calls, true, strict=True))
    )
    assert composed <= mu * (1 + 1e-12)
    assert composed == pytest.approx(mu, rel=1e-12)
    assert result.sizes is not None and result.sizes.shape == (3,) and (result.sizes >= 0).all()
    assert result.loss is not None and result.loss_se is not None
    bound = sm.exact_summary(X, result.centers, radius=1.5).bound
    assert bound < 4 * 1.5**2
    assert result.loss_se == pytest.approx(bound * loss_sigma / result.n_public, rel=1e-12)


def test_without_summaries_the_plan_is_unchanged() -> None:
    plain = plan_run(20_000, 16, 16, epsilon=1.0, delta=1e-6)
    assert plain.summary_mu is None
    with_summaries = plan_run(20_000, 16, 16, epsilon=1.0, delta=1e-6, summaries=True)
    assert with_summaries.mu == plain.mu and with_summaries.releases == plain.releases
    # The centres keep sqrt(1 - f^2) of mu: their sigma grows by 1 / sqrt(1 - f^2).
    ratio = with_summaries.sigma / plain.sigma
    assert ratio == pytest.approx(1 / math.sqrt(1 - SUMMARY_MU_FRACTION**2), rel=1e-9)
    with pytest.raises(ClusteringInputError):
        plan_run(100, 2, 2, mu=1.0, summaries=True, summary_fraction=1.0)


def test_the_loss_is_close_to_the_exact_loss_of_the_released_centres() -> None:
    # 20,000 rows at mu = 2: the loss's SE is (2R)^2 sigma_l / N~ ~ 1e-4, far below the loss.
    X = blobs(20_000, 2, 4, spread=0.1)
    result = cluster(
        X, 4, radius=1.0, mu=2.0, n_public=20_000, summaries=True, rng=np.random.default_rng(1)
    )
    assert result.loss is not None and result.loss_se is not None
    exact = kmeans_loss(X, result.centers)
    # Six standard errors plus the grid's rounding: fails with probability ~2e-9.
    assert abs(result.loss - exact) <= 6 * result.loss_se + 1e-5
    counts = sm.exact_summary(X, result.centers, radius=1.0).counts
    assert result.sizes is not None
    assert np.abs(result.sizes - counts).max() <= 6 * summary_sigmas(result.summary_mu or 0)[0]


# ---------------------------------------------------------------------------------------------
# The elbow rule and the sweep


def test_equal_share_composes_to_at_most_the_total() -> None:
    for total, parts in [(1.0, 4), (0.2785, 3), (5.0, 7), (1e-3, 32)]:
        share = equal_share(total, parts)
        assert share == pytest.approx(total / math.sqrt(parts), rel=1e-14)
        from fractions import Fraction

        assert parts * Fraction(share) ** 2 <= Fraction(total) ** 2


def test_suggest_k_is_the_first_k_no_larger_k_clearly_improves_on() -> None:
    ks = [2, 4, 8, 16]
    ses = [0.001] * 4
    assert suggest_k(ks, [1.0, 0.5, 0.1, 0.095], ses) == 8
    assert suggest_k(ks, [1.0, 0.9, 0.88, 0.85], ses) == 2  # no drop beyond 20%
    assert suggest_k(ks, [1.0, 0.5, 0.3, 0.1], ses) == 16  # every step still pays
    # A 30% drop that is within two standard errors of noise neither counts nor is ruled
    # out: the noise decides where the elbow is, so no k is suggested.
    assert suggest_k(ks, [1.0, 0.5, 0.1, 0.07], [0.001, 0.001, 0.01, 0.01]) is None
    # A drop to exactly 20% is the rule's border: the noise decides there too.
    assert suggest_k(ks, [1.0, 0.9, 0.85, 0.8], ses) is None
    # Order of the input does not matter.
    assert suggest_k([8, 2, 16, 4], [0.1, 1.0, 0.095, 0.5], ses) == 8
    with pytest.raises(ValueError):
        suggest_k([], [], [])


def test_a_seeded_sweep_orders_its_losses_and_finds_the_true_k(
    log: ReleaseLog,
) -> None:
    # Four blobs and k up to 4 (at k = 8 each blob splits and its exact loss falls by about a
    # third, past the elbow rule's 20%, so there the noise would decide between 4 and 8:
    # `sweep-elbow-unclear`, tests/unit/test_centre_error.py).
    X = blobs(6000, 2, 4, seed=2, spread=0.04)
    result = sweep(
        X, [1, 2, 3, 4], radius=1.0, epsilon=4.0, delta=1e-6, rng=np.random.default_rng(7)
    )
    losses = [r.loss for r in result.results]
    assert result.ks == (1, 2, 3, 4)
    assert losses[0] > losses[1] > losses[2] > losses[3]  # type: ignore[operator]
    assert result.suggested_k == 4
    # One shared noisy count, then four jobs of mu/sqrt(4) (less the count): exactly mu.
    mu = mu_from_epsilon_delta(4.0, 1e-6)
    assert result.count_mu is not None
    assert all(r.n_public == result.n_public for r in result.results)
    assert log.composed_mu() == pytest.approx(mu, rel=1e-12)
    # Exactly, not in floats (a float sum of 61 terms can land an ulp above mu).
    assert sum(1 / Fraction(sigma) ** 2 for _, sigma, _ in log.calls) <= Fraction(mu) ** 2
    # Each job gave its summaries the sweeps' share of its mu.
    for r in result.results:
        assert r.summary_mu == pytest.approx(SWEEP_SUMMARY_FRACTION * result.job_mu, rel=1e-15)


def test_a_summary_share_needs_summaries() -> None:
    with pytest.raises(ClusteringInputError, match="summaries"):
        cluster(blobs(100, 2, 2), 2, radius=1.0, mu=1.0, n_public=100, summary_fraction=0.5)
    result = cluster(
        blobs(500, 2, 2),
        2,
        radius=1.0,
        mu=1.0,
        n_public=500,
        summaries=True,
        summary_fraction=0.5,
        rng=np.random.default_rng(0),
    )
    assert result.summary_mu == pytest.approx(0.5, rel=1e-15)


def test_a_sweeps_split_is_one_plan_for_the_library_and_the_service() -> None:
    # A public count: m equal shares of the whole mu.
    public = plan_sweep(4, mu=1.0)
    assert (public.mu, public.count_mu, public.job_mu) == (1.0, None, equal_share(1.0, 4))
    # A library sweep's own count first, then m equal shares of the rest; all within mu.
    own = plan_sweep(4, mu=1.0, own_count=True)
    assert own.count_mu == COUNT_MU_FRACTION
    assert own.job_mu == equal_share(remaining_after(1.0, COUNT_MU_FRACTION), 4)
    assert math.sqrt(4 * own.job_mu**2 + own.count_mu**2) <= 1.0


def test_a_sweep_checks_every_k_before_drawing_noise(log: ReleaseLog) -> None:
    with pytest.raises(ClusteringInputError):
        sweep(blobs(100, 2, 2), [2, 2], radius=1.0, mu=1.0)
    with pytest.raises(ClusteringInputError):
        sweep(blobs(100, 2, 2), [2, 5000], radius=1.0, mu=1.0)
    assert log.calls == []
