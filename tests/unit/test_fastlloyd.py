"""FastLloyd: privacy accounting of its joint releases, the sensitivity of the offset sums, the
plan's parameters, k centres in the ball whatever the data, progress, and a utility check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import ClusteringInputError, cluster, plan_run
from privclust.clustering.mechanisms.grid import grid_sensitivity, relative_grid_sums
from privclust.clustering.mechanisms.lloyd import (
    count_multiplier,
    default_count_share,
    reseed_starving,
    step_radius,
)
from privclust.clustering.methods.fastlloyd import default_iterations, fastlloyd
from privclust.privacy.gdp import mu_from_epsilon_delta, noise_multiplier
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import (
    Cancelled,
    ReleaseLog,
    cancelling_at,
    joint_sensitivity,
    refused_field,
)
from tests.support.data import blobs_and_centres
from tests.support.metrics import kmeans_loss

# ---------------------------------------------------------------------------------------------
# Privacy accounting


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 4.0])
def test_each_step_is_one_joint_release_and_the_run_spends_exactly_mu(
    log: ReleaseLog, epsilon: float
) -> None:
    X, _ = blobs_and_centres(2000, 3, 3)
    delta = 1e-6
    result = fastlloyd(
        X, 3, radius=1.5, epsilon=epsilon, delta=delta, n_public=1990, rng=np.random.default_rng(1)
    )
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert (result.algorithm, result.mu, result.n_public, result.count_mu) == (
        "fastlloyd",
        mu,
        1990,
        None,
    )
    assert 2 <= result.iterations <= 7 and result.releases == result.iterations
    assert result.iterations == default_iterations(1990, 3, 3, mu, 2.0)
    # One integer release per step: the k x d offset sums and the k scaled counts together,
    # calibrated to the joint sensitivity sqrt(S^2 + M^2) with the run's one sigma.
    assert log.calls == [(joint_sensitivity(3), result.sigma, (3 * 3 + 3,))] * result.releases
    assert log.composed_mu() <= mu
    assert log.composed_mu() == pytest.approx(mu, rel=1e-12)
    assert (result.variations, result.population_size, result.projection_dim) == (0, 0, None)


def test_the_counts_get_the_papers_share_of_each_release() -> None:
    # The counts are scaled by M inside the release: their noise std is sqrt(S^2 + M^2) sigma / M
    # and the sums' sqrt(S^2 + M^2) sigma, so the counts spend M^2 / (S^2 + M^2) of each
    # release's mu^2: the paper's 1 / (1 + sqrt(4d)), up to rounding M to an integer.
    for d in (1, 2, 4, 16, 64, 1000):
        s, m = grid_sensitivity(d), count_multiplier(d, default_count_share(d))
        assert m**2 / (s**2 + m**2) == pytest.approx(1.0 / (1.0 + math.sqrt(4.0 * d)), rel=1e-5)
    assert count_multiplier(4, 0.5) == round(grid_sensitivity(4))


def test_without_a_public_count_the_run_pays_for_its_own(log: ReleaseLog) -> None:
    X, _ = blobs_and_centres(600, 4, 3)
    result = fastlloyd(X, 3, radius=1.5, mu=0.9, rng=np.random.default_rng(1))
    assert result.count_mu == pytest.approx(COUNT_MU_FRACTION * 0.9, rel=1e-15)
    assert log.calls[0] == (1.0, noise_multiplier(result.count_mu, 1), (1,))
    assert log.calls[1:] == [(joint_sensitivity(4), result.sigma, (15,))] * result.releases
    assert log.composed_mu() <= 0.9
    assert log.composed_mu() == pytest.approx(0.9, rel=1e-12)
    assert abs(result.n_public - 600) < 6 / result.count_mu


def test_replace_one_uses_the_exact_count_and_its_sensitivity(
    log: ReleaseLog,
) -> None:
    X, _ = blobs_and_centres(800, 5, 4)
    result = fastlloyd(
        X, 4, radius=2.0, mu=0.8, relation="replace-one", rng=np.random.default_rng(2)
    )
    assert (result.relation, result.n_public, result.count_mu) == ("replace-one", 800, None)
    # Within one cluster a replaced row moves the sum by 2S; across two, two sums by S and two
    # counts by M each: the larger of 2S and sqrt(2 (S^2 + M^2)).
    expected = (joint_sensitivity(5, "replace-one"), result.sigma, (24,))
    assert log.calls == [expected] * result.releases
    assert log.composed_mu() == pytest.approx(0.8, rel=1e-12)
    with pytest.raises(ClusteringInputError):
        fastlloyd(X, 4, radius=2.0, mu=0.8, relation="replace-one", n_public=799)


def test_one_row_moves_the_joint_vector_by_at_most_its_sensitivity() -> None:
    # Adding one row anywhere in the ball (the centres are public, fixed) changes one cluster's
    # grid sum by the row's clipped offset and its count by one: checked for rows far from every
    # centre (clipped to the step radius), near one, and at the centre itself.
    rng = np.random.default_rng(3)
    d, k, radius = 6, 3, 2.0
    points = rng.uniform(-0.8, 0.8, size=(300, d))
    centres = rng.uniform(-0.5, 0.5, size=(k, d))
    step = 0.3
    m = count_multiplier(d, default_count_share(d))
    base_sums, base_counts = relative_grid_sums(points, centres, rng.integers(k, size=300), step)
    direction = rng.normal(size=d)
    extra_rows = [
        direction / np.linalg.norm(direction) * radius,
        centres[1] + 1e-9,
        centres[2].copy(),
        -direction / np.linalg.norm(direction) * radius,
    ]
    for row in extra_rows:
        for label in range(k):
            sums, counts = relative_grid_sums(row[None, :], centres, np.array([label]), step)
            change = np.concatenate([sums.ravel(), m * counts])
            assert np.linalg.norm(change) <= math.hypot(grid_sensitivity(d), m)
            assert np.abs(sums).max() <= 2**20 + 1
    assert base_counts.sum() == 300 and base_sums.dtype == np.int64


def test_grid_sums_are_exact_int64() -> None:
    # 300,000 rows all at the step radius along one axis: each contributes exactly 2^20 units,
    # and the int64 sum is exact (no float accumulation). At 10^8 rows such a sum is below 2^47.
    n = 300_000
    points = np.zeros((n, 2))
    points[:, 0] = 1.0
    sums, counts = relative_grid_sums(points, np.zeros((1, 2)), np.zeros(n, dtype=np.intp), 0.25)
    assert sums.tolist() == [[n * 2**20, 0]] and counts.tolist() == [n]


# ---------------------------------------------------------------------------------------------
# The plan


def test_the_plan_follows_the_papers_rules() -> None:
    mu = mu_from_epsilon_delta(1.0, 20_000**-1.1)
    # Large clusters in few dimensions: Su et al.'s bound allows the cap of 7 steps...
    assert plan_run(20_000, 4, 4, algorithm="fastlloyd", mu=mu).iterations == 7
    # ...many small clusters only the floor of 2.
    assert plan_run(20_000, 16, 64, algorithm="fastlloyd", mu=mu).iterations == 2
    assert plan_run(20_000, 16, 64, algorithm="fastlloyd", mu=1e300).iterations == 7
    assert plan_run(20_000, 16, 64, algorithm="fastlloyd", mu=mu, iterations=12).iterations == 12
    plan = plan_run(20_000, 16, 64, algorithm="fastlloyd", mu=mu)
    assert (plan.releases, plan.progress_total, plan.variations, plan.population_size) == (
        2,
        2,
        0,
        0,
    )
    assert plan.sigma == pytest.approx(math.sqrt(2) / mu, rel=1e-12)
    # Step radii: R first, then min(R, alpha R / k^(1/d)).
    assert step_radius(1, 3.0, 4, 64, 2.0) == 3.0
    assert step_radius(2, 3.0, 4, 64, 2.0) == pytest.approx(3.0 * 2 / 64**0.25)
    assert step_radius(2, 3.0, 16, 16, 2.0) == 3.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"step_fraction": 0.0}, "step_fraction"),
        ({"step_fraction": 1e9}, "step_fraction"),
        ({"count_share": 1.0}, "count_share"),
        ({"count_share": -0.1}, "count_share"),
        ({"reseed_ratio": 1.0}, "reseed_ratio"),
        ({"reseed_ratio": float("nan")}, "reseed_ratio"),
        ({"iterations": 0}, "iterations"),
        ({"k": 11, "n_public": 10}, "k"),
    ],
)
def test_invalid_parameters_name_the_field_before_any_noise(
    log: ReleaseLog, kwargs: dict[str, object], field: str
) -> None:
    # Refused before anything was released (not even a noisy count).
    assert refused_field(log, fastlloyd, kwargs) == field


# ---------------------------------------------------------------------------------------------
# Always k finite centres in the ball


def test_k_centres_in_the_ball_with_empty_clusters_and_k_near_n() -> None:
    # Every row is the same point: at most one cluster gets any rows, the others are empty and
    # still released (noise only), moved at most one step, and projected into the ball.
    X = np.tile(np.linspace(-1, 1, 5), (300, 1))
    for mu, k, rows in ((1.0, 6, 300), (0.05, 6, 300), (1.0, 5, 5), (1.0, 9, 10), (50.0, 3, 3)):
        result = fastlloyd(
            X[:rows], k, radius=4.0, center=np.full(5, 0.5), mu=mu, rng=np.random.default_rng(k)
        )
        assert result.centers.shape == (k, 5) and np.isfinite(result.centers).all()
        assert np.all(np.linalg.norm(result.centers - 0.5, axis=1) <= 4.0)


def test_one_extreme_row_never_makes_a_run_fail() -> None:
    rng = np.random.default_rng(12)
    base = np.column_stack([np.full(200, -9.9e99), rng.uniform(-0.5, 0.5, 200)])
    centre = np.array([-9.9e99, 0.0])  # at the domain limits: |c_i| + R <= 1e100
    for X in (base, np.vstack([base, [[1.5e308, 0.0]]])):
        result = cluster(
            X, 2, algorithm="fastlloyd", radius=1.0, center=centre, mu=1.0, n_public=205
        )
        assert result.centers.shape == (2, 2) and np.isfinite(result.centers).all()
        assert result.algorithm == "fastlloyd"


def test_a_starving_centre_is_moved_to_split_a_crowded_one() -> None:
    centres = np.array([[0.5, 0.0], [-0.5, 0.0], [0.0, 0.5]])
    rng = np.random.default_rng(0)
    moved = reseed_starving(centres, np.array([2000.0, 1000.0, -3.0]), 4.0, 0.5, 1.0, rng)
    # The empty centre now sits next to the crowded one (within 1e-3 of the step), which moved
    # by as little in the opposite direction; the middle one is untouched.
    np.testing.assert_allclose(moved[2], centres[0], atol=1e-3 * 0.5 + 1e-15)
    np.testing.assert_allclose(moved[0] - centres[0], centres[0] - moved[2], atol=1e-15)
    np.testing.assert_array_equal(moved[1], centres[1])
    kept = reseed_starving(centres, np.array([2000.0, 1000.0, 600.0]), 4.0, 0.5, 1.0, rng)
    np.testing.assert_array_equal(kept, centres)


# ---------------------------------------------------------------------------------------------
# Progress, cancellation and utility


def test_progress_reports_every_step_and_cancels() -> None:
    X, _ = blobs_and_centres(400, 3, 2)
    seen: list[tuple[int, int]] = []
    fastlloyd(X, 2, radius=1.5, mu=1.0, iterations=4, progress=lambda t, n: seen.append((t, n)))
    assert seen == [(t, 4) for t in range(1, 5)]

    calls: list[int] = []
    progress = cancelling_at(2, calls)
    with pytest.raises(Cancelled):
        cluster(X, 2, algorithm="fastlloyd", radius=1.5, mu=1.0, iterations=5, progress=progress)
    assert calls == [1, 2]


def test_seeded_utility_on_separated_blobs() -> None:
    # 6000 rows, 4 blobs (std 0.05) in 3 dimensions, mu = 1: the loss must be within 1.5x the
    # loss at the true blob centres. Over run seeds 0..199 on this data the bound failed for
    # none (largest ratio 1.007), so this fixed seed is far from the edge. Without reseeding
    # (the paper's Lloyd steps alone) 170 of those 200 runs fail, stuck with one centre on two
    # blobs (seed 7: ratio 4.4), so the check also covers `reseed_starving`.
    X, centres = blobs_and_centres(6000, 3, 4, seed=5)
    optimum = kmeans_loss(X, centres)
    result = fastlloyd(X, 4, radius=1.5, mu=1.0, n_public=6000, rng=np.random.default_rng(7))
    assert kmeans_loss(X, result.centers) <= 1.5 * optimum
