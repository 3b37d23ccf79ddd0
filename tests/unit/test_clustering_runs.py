"""Whole-run tests of pe_means / hdpe_means / cluster: privacy accounting, HDPE's final releases,
progress and cancellation, input checks, and the memmap / randomness contract."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from privclust.clustering import (
    ClusteringInputError,
    ClusteringResult,
    cluster,
    hdpe_means,
    pe_means,
    plan_run,
)
from privclust.clustering.mechanisms.grid import grid_sensitivity, release_means
from privclust.privacy.gdp import PrivacyParameterError, mu_from_epsilon_delta, noise_multiplier
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import Cancelled, ReleaseLog, cancelling_at, composed_mu
from tests.support.data import blobs
from tests.support.fixed_noise import scaled

# ---------------------------------------------------------------------------------------------
# Privacy accounting


@pytest.mark.parametrize("epsilon", [0.25, 1.0, 3.0])
def test_pe_means_spends_exactly_the_requested_mu(log: ReleaseLog, epsilon: float) -> None:
    X = blobs(600, 3, 3)
    delta = 1e-6
    result = pe_means(
        X, 3, radius=1.5, epsilon=epsilon, delta=delta, n_public=590, rng=np.random.default_rng(1)
    )
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert result.mu == mu and result.epsilon == epsilon and result.delta == delta
    assert (result.n_public, result.count_mu, result.relation) == (590, None, "add-remove")
    # T = floor(4 sqrt(3)) = 6, times epsilon when epsilon > 1.
    assert result.iterations == result.releases == (18 if epsilon == 3.0 else 6)
    assert len(log.calls) == result.releases
    assert all(s == 1.0 and sig == result.sigma for s, sig, _ in log.calls)
    assert log.composed_mu() <= mu
    assert log.composed_mu() == pytest.approx(mu, rel=1e-12)
    assert math.sqrt(result.releases) / result.sigma <= mu


def test_without_a_public_count_the_run_pays_for_its_own(log: ReleaseLog) -> None:
    # No N~ given: a tenth of mu buys a noisy count (sensitivity 1, one value), and the
    # histograms share the rest; together they compose to exactly mu.
    result = pe_means(blobs(600, 3, 3), 3, radius=1.5, mu=0.9, rng=np.random.default_rng(1))
    assert result.count_mu == pytest.approx(COUNT_MU_FRACTION * 0.9, rel=1e-15)
    assert log.calls[0] == (1.0, noise_multiplier(result.count_mu, 1), (1,))
    assert Fraction(log.calls[0][1]) * Fraction(result.count_mu) >= 1  # 1/mu, rounded up
    assert len(log.calls) == result.releases + 1
    assert all(s == 1.0 and sig == result.sigma for s, sig, _ in log.calls[1:])
    assert log.composed_mu() <= 0.9
    assert log.composed_mu() == pytest.approx(0.9, rel=1e-12)
    assert abs(result.n_public - 600) < 6 * 1.0 / result.count_mu  # N~ is near N


def test_replace_one_uses_the_exact_count_and_doubled_sensitivities(
    log: ReleaseLog,
) -> None:
    X = blobs(800, 40, 4)
    result = hdpe_means(
        X, 4, radius=2.0, mu=0.8, relation="replace-one", rng=np.random.default_rng(2)
    )
    assert (result.relation, result.n_public, result.count_mu) == ("replace-one", 800, None)
    assert len(log.calls) == 16  # no count release: N is public
    assert all(s == math.sqrt(2.0) for s, _, _ in log.calls[:14])  # vote histograms
    # sums: 2R, priced as 14 releases (sensitivity / sqrt(14) with the run's sigma)
    assert log.calls[-2] == (scaled(2.0 * grid_sensitivity(40), 14), result.sigma, (4, 40))
    assert log.calls[-1] == (math.sqrt(2.0), result.sigma, (4,))  # counts
    assert result.releases == 14 + 1 + 14
    true = [math.sqrt(2.0)] * 14 + [2.0 * grid_sensitivity(40), math.sqrt(2.0)]
    assert composed_mu(log.calls, true) == pytest.approx(0.8, rel=1e-12)
    with pytest.raises(ClusteringInputError):
        hdpe_means(X, 4, radius=2.0, mu=0.8, relation="replace-one", n_public=799)


def test_hdpe_means_spends_exactly_the_requested_mu(log: ReleaseLog) -> None:
    X = blobs(800, 40, 4)
    result = hdpe_means(X, 4, radius=2.0, mu=0.8, n_public=812, rng=np.random.default_rng(2))
    # 14 PE iterations in R^16 (floor(4 sqrt(16)) - 2), the noisy counts (one release) and the
    # noisy sums priced as 14 releases (half of the releases' mu^2): 29 releases, all with
    # sigma = sqrt(29) / mu.
    assert (result.iterations, result.releases, result.projection_dim) == (14, 29, 16)
    assert result.sigma >= math.sqrt(29) / 0.8
    assert result.sigma == pytest.approx(math.sqrt(29) / 0.8, rel=1e-15)
    assert len(log.calls) == 16
    assert all(sig == result.sigma for _, sig, _ in log.calls)
    sums, counts = log.calls[-2], log.calls[-1]
    # Sensitivity R: 2^20 grid units (a row's norm on the grid), one draw per coordinate, its
    # noise std R sigma / sqrt(14).
    assert sums == (scaled(grid_sensitivity(40), 14), result.sigma, (4, 40))
    assert grid_sensitivity(40) == pytest.approx(2.0**20, rel=1e-5)
    assert counts == (1.0, result.sigma, (4,))
    true = [1.0] * 14 + [grid_sensitivity(40), 1.0]
    assert composed_mu(log.calls, true) <= 0.8 * (1 + 1e-12)
    assert composed_mu(log.calls, true) == pytest.approx(0.8, rel=1e-12)
    # The published split (sum_weight=1) is still available: 16 releases, sigma = 4 / mu.
    published = hdpe_means(X, 4, radius=2.0, mu=0.8, n_public=812, sum_weight=1)
    assert (published.releases, published.sigma) == (16, pytest.approx(5.0, rel=1e-15))


def test_plan_prices_a_job_before_it_runs() -> None:
    plan = plan_run(20_000, 16, 16, algorithm="pe-means", epsilon=1.0, delta=1 / 20_000**1.1)
    assert (plan.algorithm, plan.iterations, plan.releases, plan.variations) == (
        "pe-means",
        16,
        16,
        250,
    )
    assert plan.population_size == 251 * 16 and plan.progress_total == 16
    # epsilon > 1 scales T (pe-lloyd's up to twice its base, then 4 Lloyd steps); mu alone
    # does not.
    assert plan_run(20_000, 16, 16, algorithm="pe-means", epsilon=2.5, delta=1e-6).iterations == 40
    assert plan_run(20_000, 16, 16, epsilon=2.5, delta=1e-6).iterations == 32
    assert plan_run(20_000, 16, 16, mu=3.0).iterations == 16
    high = plan_run(20_000, 64, 4, algorithm="hdpe-means", epsilon=1.0, delta=1e-6)
    assert (high.algorithm, high.iterations, high.releases, high.progress_total) == (
        "hdpe-means",
        14,
        29,
        15,
    )
    # The population cap never binds at N = 20,000 (population ~ N/5 + k)...
    for k in (1, 3, 4, 16, 64, 500):
        pe = plan_run(20_000, 16, k, algorithm="pe-means", mu=1.0)
        assert pe.variations == max(20_000 // (5 * k), 4)
    # ...but does at a million rows: L = N/(5k) = 12,500, capped to (L+1)*k <= 8192.
    big = plan_run(1_000_000, 16, 16, algorithm="pe-means", epsilon=1.0, delta=1e-7)
    assert big.variations == 511 and big.population_size == 8192


# ---------------------------------------------------------------------------------------------
# HDPE final step


def test_hdpe_noise_on_sums_is_isotropic() -> None:
    # The published code adds one scalar per cluster to every coordinate (correlation 1 between
    # coordinates). Here each coordinate gets its own draw: over 4000 releases the sample
    # correlation of two coordinates has standard error ~0.016; |r| < 0.1 for all 28 pairs
    # fails with probability < 1e-8, and the variance is within 8% of (Delta sigma)^2 (over 9
    # SE), Delta = R in grid units. The released sums are integers (no float noise bits).
    rng = np.random.default_rng(11)
    plan = plan_run(1000, 8, 1, algorithm="hdpe-means", projection_dim=8, mu=2.0)
    sums = np.zeros((1, 8), dtype=np.int64)
    counts = np.array([10**12], dtype=np.int64)  # a huge count: the centre is the noise / 1e12
    unit = 3.0 * 2.0**-20
    draws = np.array(
        [release_means(sums, counts, plan, 3.0, rng)[0][0] * 1e12 / unit for _ in range(4000)]
    )
    corr = np.corrcoef(draws.T)
    off_diagonal = corr[~np.eye(8, dtype=bool)]
    assert np.abs(off_diagonal).max() < 0.1
    expected = (grid_sensitivity(8) * plan.sigma) ** 2
    np.testing.assert_allclose(draws.var(axis=0), expected, rtol=0.08)


def test_hdpe_returns_k_centres_even_when_clusters_are_empty() -> None:
    # Every row is the same point: at most one low-dimensional cluster gets any rows, the other
    # k - 1 are empty, and each is still released (noise only) and returned, inside the ball.
    X = np.tile(np.linspace(-1, 1, 40), (300, 1))
    result = hdpe_means(
        X, 6, radius=10.0, center=np.zeros(40), mu=1.0, rng=np.random.default_rng(4)
    )
    assert result.centers.shape == (6, 40)
    assert np.isfinite(result.centers).all()
    assert np.all(np.linalg.norm(result.centers, axis=1) <= 10.0 * (1 + 1e-12))
    # The small-sample edge: k = N.
    tiny = hdpe_means(X[:3], 3, radius=10.0, mu=1.0, rng=np.random.default_rng(5))
    assert tiny.centers.shape == (3, 40)


def test_pe_means_returns_original_coordinates() -> None:
    # Data far from the origin, with the domain declared around it: centres land on the blobs.
    offset = np.array([100.0, -50.0, 7.0])
    X = blobs(3000, 3, 2, seed=3) + offset
    result = pe_means(
        X, 2, radius=1.5, center=offset, epsilon=4.0, delta=1e-6, rng=np.random.default_rng(6)
    )
    assert isinstance(result, ClusteringResult) and result.algorithm == "pe-means"
    true_centres = np.random.default_rng(3).uniform(-0.6, 0.6, size=(2, 3)) + offset
    gaps = np.linalg.norm(result.centers[:, None, :] - true_centres[None], axis=2).min(axis=0)
    assert gaps.max() < 0.05
    assert not result.centers.flags.writeable


# ---------------------------------------------------------------------------------------------
# Progress and cancellation


def test_progress_reports_every_iteration_and_hdpe_final_step() -> None:
    seen: list[tuple[int, int]] = []
    pe_means(
        blobs(300, 2, 2),
        2,
        radius=1.5,
        mu=1.0,
        rng=np.random.default_rng(0),
        progress=lambda i, n: seen.append((i, n)),
    )
    assert seen == [(t, 5) for t in range(1, 6)]  # T = floor(4 sqrt(2)) = 5
    seen.clear()
    hdpe_means(
        blobs(300, 20, 2),
        2,
        radius=2.0,
        mu=1.0,
        iterations=3,
        rng=np.random.default_rng(0),
        progress=lambda i, n: seen.append((i, n)),
    )
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]


@pytest.mark.parametrize("algorithm", ["pe-means", "hdpe-means"])
def test_an_exception_from_progress_stops_the_run(algorithm: str) -> None:
    calls: list[int] = []
    progress = cancelling_at(2, calls)
    with pytest.raises(Cancelled):
        cluster(blobs(300, 20, 2), 2, algorithm=algorithm, radius=2.0, mu=1.0, progress=progress)
    assert calls == [1, 2]


def _blas_threads() -> set[int]:
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


@pytest.mark.parametrize("algorithm", ["pe-means", "hdpe-means", "pe-lloyd"])
def test_the_iterations_run_with_one_blas_thread_and_restore_the_limit(algorithm: str) -> None:
    # BLAS threads left spinning after a multi-threaded product take a core from the vote's own
    # threads, so the whole loop (and HDPE's projection) runs on one BLAS thread.
    seen: list[set[int]] = []

    def progress(iteration: int, total: int) -> None:
        seen.append(_blas_threads())
        if iteration == 2:
            raise Cancelled

    with threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() == {2}
        with pytest.raises(Cancelled):
            cluster(
                blobs(300, 20, 2), 2, algorithm=algorithm, radius=2.0, mu=1.0, progress=progress
            )
        assert seen == [{1}, {1}]
        assert _blas_threads() == {2}


# ---------------------------------------------------------------------------------------------
# Inputs


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"X": np.zeros(10)}, "X"),
        ({"X": np.zeros((2, 3, 4))}, "X"),
        ({"X": np.zeros((0, 3))}, "X"),
        ({"X": np.array([[0.0, 1.0], [np.nan, 0.0]])}, "X"),
        ({"X": np.array([[0.0, np.inf]] * 3)}, "X"),
        ({"X": np.array([["a", "b"]] * 3)}, "X"),
        ({"k": 0}, "k"),
        ({"k": 11, "n_public": 10}, "k"),
        ({"k": 2.5}, "k"),
        ({"k": True}, "k"),
        ({"radius": 0.0}, "radius"),
        ({"radius": -1.0}, "radius"),
        ({"radius": float("nan")}, "radius"),
        ({"center": [0.0, 0.0, 0.0]}, "center"),
        ({"center": [0.0, float("inf")]}, "center"),
        ({"mu": 1.0, "epsilon": 1.0, "delta": 1e-6}, "mu"),
        ({"mu": None}, "epsilon"),
        ({"mu": None, "epsilon": 1.0}, "delta"),
        ({"mu": 0.0}, "mu"),
        ({"mu": float("nan")}, "mu"),
        ({"iterations": 0}, "iterations"),
        ({"variations": 0}, "variations"),
        ({"variations": 10**6}, "variations"),
        ({"algorithm": "kmeans"}, "algorithm"),
        ({"algorithm": "hdpe-means", "projection_dim": 0}, "projection_dim"),
    ],
)
def test_invalid_inputs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"X": np.zeros((10, 2)), "k": 2, "radius": 1.0, "mu": 1.0}
    args.update(kwargs)
    X, k = args.pop("X"), args.pop("k")
    with pytest.raises(ClusteringInputError) as info:
        cluster(X, k, **args)  # type: ignore[arg-type]
    assert info.value.field == field
    assert isinstance(info.value, ValueError) and str(info.value)


@pytest.mark.parametrize(
    ("epsilon", "delta", "field"),
    [(0.0, 1e-6, "epsilon"), (1.0, 1.5, "delta"), (-1.0, 1e-6, "epsilon")],
)
def test_bad_epsilon_delta_raise_the_privacy_error(
    epsilon: float, delta: float, field: str
) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        pe_means(np.zeros((10, 2)), 2, radius=1.0, epsilon=epsilon, delta=delta)
    assert info.value.field == field


def test_auto_runs_pe_lloyd_in_a_projection_above_16_columns() -> None:
    low = cluster(blobs(200, 16, 2), 2, radius=2.0, mu=1.0, iterations=2)
    high = cluster(blobs(200, 17, 2), 2, radius=2.0, mu=1.0, iterations=2)
    assert (low.algorithm, high.algorithm) == ("pe-lloyd", "pe-lloyd")
    assert (low.projection_dim, high.projection_dim) == (None, 16)


# ---------------------------------------------------------------------------------------------
# Data handling and randomness


def test_read_only_memmap_input_is_not_modified(tmp_path: Path) -> None:
    path = tmp_path / "rows.npy"
    data = blobs(2000, 5, 3) * 3  # many rows outside the radius-1 ball: clipping happens
    np.save(path, data)
    X = np.load(path, mmap_mode="r")
    result = pe_means(X, 3, radius=1.0, mu=2.0)
    assert result.centers.shape == (3, 5)
    np.testing.assert_array_equal(np.load(path), data)


def test_default_noise_is_fresh_every_run() -> None:
    # Without a test generator every run draws new noise (ChaCha20 keyed from OS entropy): two
    # runs on the same data differ. (Equal outputs would need identical Levy variations, drawn
    # as continuous values: probability 0.)
    X = blobs(500, 2, 2)
    first = pe_means(X, 2, radius=1.5, mu=0.5).centers
    second = pe_means(X, 2, radius=1.5, mu=0.5).centers
    assert not np.array_equal(first, second)


def test_a_test_generator_makes_runs_reproducible() -> None:
    X = blobs(500, 2, 2)
    a = pe_means(X, 2, radius=1.5, mu=0.5, rng=np.random.default_rng(9)).centers
    b = pe_means(X, 2, radius=1.5, mu=0.5, rng=np.random.default_rng(9)).centers
    np.testing.assert_array_equal(a, b)


def test_one_extreme_row_never_makes_a_run_fail() -> None:
    # The neighbouring pair of the soundness audit: with and without one row at +1.5e308 on a
    # domain centred at -9.9e99 (the domain limits allow no further), both runs succeed and
    # return k centres inside the domain.
    rng = np.random.default_rng(12)
    base = np.column_stack([np.full(200, -9.9e99), rng.uniform(-0.5, 0.5, 200)])
    centre = np.array([-9.9e99, 0.0])  # at the domain limits: |c_i| + R <= 1e100
    for X in (base, np.vstack([base, [[1.5e308, 0.0]]])):
        for algorithm in ("pe-means", "hdpe-means"):
            result = cluster(
                X, 2, algorithm=algorithm, radius=1.0, center=centre, mu=1.0, n_public=205
            )
            assert result.centers.shape == (2, 2) and np.isfinite(result.centers).all()


@pytest.mark.parametrize("radius", [1e-100, 1e-60, 1e39, 1e100])
@pytest.mark.parametrize(
    "algorithm", ["pe-means", "pe-lloyd", "hdpe-means", "fastlloyd", "lsh-coreset"]
)
@pytest.mark.parametrize("d", [2, 8])
def test_every_declared_radius_keeps_rows_finite_and_distinct(
    radius: float, algorithm: str, d: int
) -> None:
    # The domain allows radii from 1e-100 to 1e100; a float32 working copy of the rows would
    # overflow beyond 3.4e38 (one row on the sphere made the KD-tree vote raise, and made
    # pe-lloyd's grid sums unbounded) and flush rows to zero below 1e-38. A run on data scaled
    # by R does as well, in units of R, as it does at R = 1; warnings are errors here, so no
    # inf or NaN may appear on the way.
    rng = np.random.default_rng(5)
    unit = np.concatenate([rng.normal(0.5, 0.05, (600, d)), rng.normal(-0.5, 0.05, (600, d))])
    unit /= max(1.0, float(np.linalg.norm(unit, axis=1).max()))
    unit[0] = 0.0
    unit[0, 0] = 1.0  # one row on the sphere
    one_centre_loss = float(np.mean(np.sum((unit - unit.mean(axis=0)) ** 2, axis=1)))
    losses = []
    for scale in (1.0, radius):
        result = cluster(
            unit * scale,
            2,
            algorithm=algorithm,
            radius=scale,
            mu=20.0,
            n_public=1200,
            rng=np.random.default_rng(1),
        )
        assert np.isfinite(result.centers).all()
        assert (np.linalg.norm(result.centers, axis=1) <= scale * (1 + 1e-9)).all()
        centres = result.centers / scale
        sq = np.sum((unit[:, None, :] - centres[None]) ** 2, axis=2).min(axis=1)
        losses.append(float(sq.mean()))
    assert losses[1] < 0.2 * one_centre_loss
    assert losses[1] < 2.0 * losses[0] + 0.01 * one_centre_loss


@pytest.mark.parametrize(
    "algorithm", ["pe-means", "hdpe-means", "pe-lloyd", "fastlloyd", "lsh-coreset"]
)
def test_a_budget_the_noise_cannot_serve_is_refused_when_planned(algorithm: str) -> None:
    # Every release's noise std is capped (noise.MAX_NOISE_STD); a job over it used to be
    # admitted and charged, then fail when it ran. The planner now refuses it, naming the field,
    # and whatever it accepts runs.
    X = np.random.default_rng(0).uniform(-0.5, 0.5, size=(500, 8))
    accepted = []
    for mu in (1e-5, 1e-6, 3e-7, 1e-7, 1e-8, 1e-12, 1e-14):
        try:
            plan_run(500, 8, 2, algorithm=algorithm, mu=mu)
        except ClusteringInputError as exc:
            assert exc.field == "mu" and "too small" in str(exc)
            with pytest.raises(ClusteringInputError):
                plan_run(500, 8, 2, algorithm=algorithm, mu=mu, summaries=True)
            continue
        accepted.append(mu)
        cluster(X, 2, algorithm=algorithm, radius=1.0, mu=mu, n_public=500)
    assert 1e-6 in accepted and 1e-14 not in accepted
    if algorithm != "pe-means":  # only counts: noise std sqrt(T) / mu
        assert 1e-8 not in accepted
    with pytest.raises(ClusteringInputError) as refused:
        plan_run(500, 8, 2, algorithm=algorithm, epsilon=1e-14, delta=1e-15)
    assert refused.value.field == "epsilon"


def test_released_centres_sit_on_the_release_grid() -> None:
    # Centred coordinates are whole multiples of R / 2^32: no finer digit is ever released.
    radius, centre = 1.5, np.array([0.25, -3.0, 7.0])
    X = blobs(500, 3, 2) + centre
    result = pe_means(X, 2, radius=radius, center=centre, mu=1.0, n_public=500)
    units = (result.centers - centre) / (radius * 2.0**-32)
    np.testing.assert_allclose(units, np.round(units), atol=1e-3)


def test_the_planner_refuses_what_could_never_run() -> None:
    # Found by fuzzing the API: a huge epsilon scaled the default T to millions of iterations
    # (or overflowed), and a k whose smallest population exceeds the cap was admitted, charged
    # and then failed. Both are decided here, from public inputs, before anything is charged.
    # (pe-lloyd, auto's method, stops at twice its base, 32 at d = 16, and at its base, 16,
    # with a second start, which 200,000 rows per 16 clusters buy at any of these budgets.)
    for epsilon in (1e6, 1e308):
        pe = plan_run(200_000, 16, 16, algorithm="pe-means", epsilon=epsilon, delta=1e-6)
        assert pe.iterations == 256
        assert plan_run(200_000, 16, 16, epsilon=epsilon, delta=1e-6).iterations == 16
        assert (
            plan_run(200_000, 16, 16, epsilon=epsilon, delta=1e-6, second_start=0).iterations == 32
        )
    pe = plan_run(200_000, 16, 16, algorithm="pe-means", epsilon=4.0, delta=1e-6)
    assert pe.iterations == 64  # unchanged
    assert plan_run(200_000, 32, 1638, mu=1.0).population_size <= 8192
    with pytest.raises(ClusteringInputError) as info:
        plan_run(200_000, 32, 10_000, mu=1.0)
    assert info.value.field == "k" and "at most 1638" in str(info.value)
    # Fewer variations per centre let a larger k fit.
    assert plan_run(200_000, 16, 3000, mu=1.0, variations=1).population_size == 6000
    with pytest.raises(ClusteringInputError) as info:
        plan_run(200_000, 16, 3000, mu=1.0, variations=2)
    assert info.value.field == "variations"
