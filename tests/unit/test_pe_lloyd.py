"""pe-lloyd: its releases compose to the job's mu (the plan prices what the run releases), the
Lloyd steps get their share, its parameters are validated, progress, and a utility check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import ClusteringInputError, cluster, plan_run
from privclust.clustering.mechanisms.grid import grid_sensitivity, relative_grid_sums
from privclust.clustering.mechanisms.lloyd import (
    count_multiplier,
    default_count_share,
    default_lloyd_steps,
    iterations_cap,
    moved_centres,
    reseed_beside,
)
from privclust.clustering.methods.lloyd_chain import lloyd_weight, plan_lloyd_releases, step_radii
from privclust.clustering.methods.pe_lloyd import PROJECT_ABOVE_DIM, pe_lloyd
from privclust.clustering.methods.pe_lloyd_projected import plan_projected_releases
from privclust.clustering.run.plan import default_pe_iterations
from privclust.privacy.gdp import mu_from_epsilon_delta, noise_multiplier
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import ReleaseLog, composed_mu, joint_sensitivity
from tests.support.data import blobs
from tests.support.fixed_noise import scaled
from tests.support.metrics import kmeans_loss


@pytest.mark.parametrize(
    ("n_public", "steps", "share"), [(1190, None, None), (None, 2, 0.3), (1190, 1, 0.5)]
)
def test_the_releases_compose_to_the_planned_mu(
    log: ReleaseLog, n_public: int | None, steps: int | None, share: float | None
) -> None:
    X = blobs(1200, 5, 3)
    epsilon, delta = 2.0, 1e-6
    result = pe_lloyd(
        X, 3, radius=1.5, epsilon=epsilon, delta=delta, n_public=n_public,
        rng=np.random.default_rng(4), lloyd_steps=steps, lloyd_share=share,
    )  # fmt: skip
    mu = mu_from_epsilon_delta(epsilon, delta)
    plan = plan_run(
        result.n_public, 5, 3, algorithm="pe-lloyd", epsilon=epsilon, delta=delta,
        count_mu=result.count_mu, lloyd_steps=steps, lloyd_share=share,
    )  # fmt: skip
    assert (result.algorithm, result.mu, result.epsilon) == ("pe-lloyd", mu, epsilon)
    assert (result.sigma, result.releases, result.iterations) == (
        plan.sigma,
        plan.releases,
        plan.iterations,
    )
    # PE-means's own T (floor(4 sqrt(5)) = 8, times epsilon 2: the cap, so 4 Lloyd steps by
    # default).
    assert result.iterations == default_pe_iterations(5, epsilon) == iterations_cap(5) == 16
    calls = log.calls
    if n_public is None:
        assert result.count_mu == pytest.approx(COUNT_MU_FRACTION * mu, rel=1e-15)
        assert calls[0] == (1.0, noise_multiplier(result.count_mu, 1), (1,))
        calls = calls[1:]
    else:
        assert (result.count_mu, result.n_public) == (None, 1190)
    n_steps = steps or default_lloyd_steps(result.iterations, 5, result.n_public, 3, mu)
    votes, lloyd = calls[: result.iterations], calls[result.iterations :]
    assert len(lloyd) == n_steps
    assert all(s == 1.0 and sig == result.sigma for s, sig, _ in votes)
    weight = lloyd_weight(result.iterations, n_steps, share or 0.1)
    assert result.releases == result.iterations + n_steps * weight
    # Each Lloyd step: the joint sensitivity scaled by 1/sqrt(w), i.e. priced as w releases.
    for s, sig, shape in lloyd:
        assert (s, sig, shape) == (scaled(joint_sensitivity(5), weight), result.sigma, (18,))
    true = [1.0] * len(votes) + [joint_sensitivity(5)] * n_steps
    mu_releases = composed_mu(calls, true)
    assert mu_releases == pytest.approx(math.sqrt(result.releases) / result.sigma, rel=1e-12)
    total = math.hypot(mu_releases, result.count_mu or 0.0)
    assert total <= mu * (1 + 1e-12)
    assert total == pytest.approx(mu, rel=1e-12)
    # The Lloyd steps' share of the releases' mu^2 is the requested one, up to whole releases.
    lloyd_share = n_steps * weight / result.releases
    assert abs(lloyd_share - (share or 0.1)) <= 0.5 * n_steps / result.releases + 1e-12


def test_replace_one_sensitivities() -> None:
    X = blobs(800, 4, 4)
    result = pe_lloyd(
        X, 4, radius=2.0, mu=0.8, relation="replace-one", rng=np.random.default_rng(2)
    )
    assert (result.relation, result.n_public, result.count_mu) == ("replace-one", 800, None)
    plan = plan_run(800, 4, 4, algorithm="pe-lloyd", mu=0.8, relation="replace-one")
    assert (result.sigma, result.releases) == (plan.sigma, plan.releases)
    assert math.sqrt(result.releases) / result.sigma <= 0.8


def test_weights_and_parameter_checks() -> None:
    # share 0.1 of mu^2 over T = 8 releases and one step: w = round(0.8 / 0.9) = 1, 9 releases.
    assert plan_lloyd_releases(8, None, None) == (1, 1, 9, 9)
    # share 0.3, 2 steps, T = 64: w = round(0.3 * 64 / (0.7 * 2)) = 14, 64 + 28 releases.
    assert plan_lloyd_releases(64, 2, 0.3) == (2, 14, 92, 66)
    for field, kwargs in [
        ("lloyd_steps", {"lloyd_steps": 0}),
        ("lloyd_steps", {"lloyd_steps": 11}),
        ("lloyd_share", {"lloyd_share": 1.0}),
        ("lloyd_share", {"lloyd_share": float("nan")}),
    ]:
        with pytest.raises(ClusteringInputError) as info:
            plan_run(1000, 4, 3, algorithm="pe-lloyd", mu=1.0, **kwargs)  # type: ignore[arg-type]
        assert info.value.field == field


def test_progress_counts_every_pe_iteration_and_lloyd_step() -> None:
    X = blobs(500, 3, 3)
    seen: list[tuple[int, int]] = []
    result = pe_lloyd(
        X, 3, radius=1.5, mu=1.0, n_public=500, rng=np.random.default_rng(3),
        lloyd_steps=2, progress=lambda t, total: seen.append((t, total)),
    )  # fmt: skip
    total = result.iterations + 2
    assert seen == [(t, total) for t in range(1, total + 1)]
    assert result.centers.shape == (3, 3)
    assert (np.linalg.norm(result.centers, axis=1) <= 1.5).all()


def test_cluster_runs_it_by_name() -> None:
    X = blobs(400, 3, 2)
    result = cluster(
        X, 2, algorithm="pe-lloyd", radius=1.5, mu=1.0, n_public=400, rng=np.random.default_rng(5)
    )
    assert result.algorithm == "pe-lloyd" and result.centers.shape == (2, 3)


def test_the_lloyd_step_reaches_the_kmeans_loss_with_a_large_budget() -> None:
    # Well-separated blobs, mu = 20: PE-means's centres are near the blob centres and one Lloyd
    # step with a tenth of mu^2 moves them to the cluster means up to noise of std ~1e-4 R.
    # Fixed seeds; the bound has a wide margin (the run's loss is within 1% of KMeans's).
    from sklearn.cluster import KMeans

    X = blobs(4000, 4, 4, seed=7)
    floor = kmeans_loss(X, KMeans(4, n_init=10, random_state=0).fit(X).cluster_centers_)
    result = pe_lloyd(X, 4, radius=1.5, mu=20.0, n_public=4000, rng=np.random.default_rng(8))
    assert kmeans_loss(X, result.centers) <= 1.05 * floor


def test_per_cluster_step_radii_keep_the_sensitivity_in_grid_units() -> None:
    # With one clipping radius per cluster each cluster's sum is in its own grid units
    # (r_j / 2^20), so one added row still moves the joint vector by at most sqrt(S^2 + M^2)
    # grid units, whichever cluster it joins and however far it lies.
    rng = np.random.default_rng(11)
    d, k, radius = 5, 4, 1.5
    centres = rng.uniform(-0.7, 0.7, size=(k, d))
    radii = step_radii(centres, radius, k, "centres")
    assert isinstance(radii, np.ndarray) and radii.shape == (k,)
    gaps = np.linalg.norm(centres[:, None] - centres[None, :], axis=2) + np.diag([np.inf] * k)
    np.testing.assert_allclose(radii, np.minimum(gaps.min(axis=1) / 2, radius))
    m = count_multiplier(d, default_count_share(d))
    direction = rng.normal(size=d)
    for row in [direction / np.linalg.norm(direction) * radius, centres[0] + 1e-3, centres[3]]:
        for label in range(k):
            sums, counts = relative_grid_sums(row[None, :], centres, np.array([label]), radii)
            change = np.concatenate([sums.ravel(), m * counts])
            assert np.linalg.norm(change) <= joint_sensitivity(d)
    # A cluster's mean offset is rescaled by its own radius and its move capped by it.
    noisy_sums = np.full((k, d), 2.0**20)  # every offset at the radius along each axis
    moved = moved_centres(centres, noisy_sums, np.ones(k), radii, radius)
    np.testing.assert_allclose(np.linalg.norm(moved - centres, axis=1), radii, rtol=1e-9)
    # Coinciding centres get the smallest radius, not 0; the "fastlloyd" rule is one radius.
    same = np.vstack([centres[:1], centres[:1], centres[2:]])
    assert step_radii(same, radius, k, "centres")[0] == pytest.approx(1e-3 * radius)
    assert step_radii(centres, radius, k, "fastlloyd") == min(radius, 2 * radius / k ** (1 / d))


@pytest.mark.parametrize(("n_public", "steps"), [(1190, None), (None, 2)])
def test_above_32_columns_the_projected_releases_compose_to_the_planned_mu(
    log: ReleaseLog, n_public: int | None, steps: int | None
) -> None:
    d, k = PROJECT_ABOVE_DIM + 8, 3
    X = blobs(1200, d, k)
    epsilon, delta = 1.0, 1e-6
    result = pe_lloyd(
        X, k, radius=1.5, epsilon=epsilon, delta=delta, n_public=n_public,
        rng=np.random.default_rng(6), lloyd_steps=steps,
    )  # fmt: skip
    plan = plan_run(
        result.n_public, d, k, algorithm="pe-lloyd", epsilon=epsilon, delta=delta,
        count_mu=result.count_mu, lloyd_steps=steps,
    )  # fmt: skip
    assert (result.sigma, result.releases, result.iterations) == (
        plan.sigma,
        plan.releases,
        plan.iterations,
    )
    # PE-means in a 16-dimensional projection for T = 14 iterations, whatever epsilon.
    assert (plan.projection_dim, result.projection_dim, result.iterations) == (16, 16, 14)
    split = plan_projected_releases(14, steps, None)
    assert (split.sum_weight, split.weight) == (20, lloyd_weight(14 + 1 + 20, split.steps, 0.3))
    calls = log.calls[1:] if n_public is None else log.calls
    votes, rest = calls[:14], calls[14:]
    assert all(s == 1.0 and sig == result.sigma for s, sig, _ in votes)
    assert all(shape == (result.population_size,) for _, _, shape in votes[:1])
    # The noisy sums in the full space (priced as 20 releases), the counts, then each step.
    sums, counts, *lloyd = rest
    assert sums == (scaled(grid_sensitivity(d), 20), result.sigma, (k, d))
    assert counts == (1.0, result.sigma, (k,))
    assert len(lloyd) == split.steps
    for call in lloyd:
        assert call == (scaled(joint_sensitivity(d), split.weight), result.sigma, (k * d + k,))
    true = [1.0] * 14 + [grid_sensitivity(d), 1.0] + [joint_sensitivity(d)] * split.steps
    mu_releases = composed_mu(calls, true)
    assert mu_releases == pytest.approx(math.sqrt(result.releases) / result.sigma, rel=1e-12)
    assert result.releases == 14 + 1 + 20 + split.steps * split.weight
    total = math.hypot(mu_releases, result.count_mu or 0.0)
    assert total <= result.mu * (1 + 1e-12)
    assert total == pytest.approx(result.mu, rel=1e-12)
    # The Lloyd steps get about 30% of the releases' mu^2, the sums 40%.
    assert abs(split.steps * split.weight / result.releases - 0.3) < 0.02
    assert abs(20 / result.releases - 0.4) < 0.02


def test_above_32_columns_progress_counts_the_means_and_every_step() -> None:
    X = blobs(500, 40, 3)
    seen: list[tuple[int, int]] = []
    result = pe_lloyd(
        X, 3, radius=1.5, mu=1.0, n_public=500, rng=np.random.default_rng(3), iterations=4,
        lloyd_steps=2, progress=lambda t, total: seen.append((t, total)),
    )  # fmt: skip
    total = result.iterations + 1 + 2
    assert seen == [(t, total) for t in range(1, total + 1)]
    assert result.centers.shape == (3, 40)
    assert (np.linalg.norm(result.centers, axis=1) <= 1.5).all()


def test_a_starving_centre_is_moved_beside_the_crowded_one_with_its_radius() -> None:
    # Released counts of a merge: one centre holds two clusters (2000 rows), two centres share
    # one (500 each). The smaller of the two moves beside the crowded centre and takes its step
    # radius, so the next Lloyd step splits the crowd; nothing moves below the ratio.
    rng = np.random.default_rng(12)
    centres = np.array([[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0], [-0.45, 0.05, 0.0], [0.0, 0.6, 0.0]])
    counts = np.array([2000.0, 500.0, 480.0, 1000.0])
    radii = np.array([0.3, 0.025, 0.025, 0.3])
    moved, new_radii = reseed_beside(centres, counts, 3.0, radii, 1.0, rng)
    assert np.linalg.norm(moved[2] - centres[0]) == pytest.approx(1e-3 * 0.3)
    np.testing.assert_allclose(moved[2] + moved[0], 2 * centres[0])
    np.testing.assert_array_equal(moved[[1, 3]], centres[[1, 3]])
    np.testing.assert_array_equal(new_radii, [0.3, 0.025, 0.3, 0.3])
    same, same_radii = reseed_beside(centres, counts, 5.0, radii, 1.0, rng)
    np.testing.assert_array_equal(same, centres)
    np.testing.assert_array_equal(same_radii, radii)


def test_above_32_columns_the_run_reaches_the_kmeans_loss_with_a_large_budget() -> None:
    # Well-separated blobs in 48 dimensions (inside the ball), mu = 20: the projected search
    # finds the basins, the noisy means and one Lloyd step put the centres at the cluster means
    # up to noise of std ~1e-3 R. Fixed seeds; the bound has a wide margin (the run is within
    # 0.001% of KMeans).
    from sklearn.cluster import KMeans

    X = blobs(4000, 48, 5, seed=7, half_width=0.2)
    floor = kmeans_loss(X, KMeans(5, n_init=10, random_state=0).fit(X).cluster_centers_)
    result = pe_lloyd(X, 5, radius=1.5, mu=20.0, n_public=4000, rng=np.random.default_rng(8))
    assert result.projection_dim == 16
    assert kmeans_loss(X, result.centers) <= 1.05 * floor


def test_the_default_variations_stop_at_256_per_centre_above_6_columns() -> None:
    # N~/(5k) beyond 256 buys pe-lloyd nothing measurable above 6 columns and costs every row a
    # score per variation; at d <= 6, PE-means and an explicit `variations` keep their L.
    for n, k, expected in [(20_000, 4, 256), (20_000, 16, 250), (20_000, 64, 62), (150, 3, 10)]:
        assert plan_run(n, 16, k, algorithm="pe-lloyd", mu=1.0).variations == expected
    assert plan_run(20_000, 64, 4, algorithm="pe-lloyd", mu=1.0).variations == 256
    assert plan_run(20_000, 6, 4, algorithm="pe-lloyd", mu=1.0).variations == 1000
    assert plan_run(1_000_000, 16, 16, algorithm="pe-lloyd", mu=1.0).population_size == 4112
    assert plan_run(20_000, 16, 4, algorithm="pe-means", mu=1.0).variations == 1000
    assert plan_run(20_000, 16, 4, algorithm="pe-lloyd", mu=1.0, variations=900).variations == 900
    # The largest k the population allows is the same (4 variations each).
    assert plan_run(20_000, 16, 1638, algorithm="pe-lloyd", mu=1.0).variations == 4
