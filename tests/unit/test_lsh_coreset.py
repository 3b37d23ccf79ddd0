"""Whole-run tests of lsh_coreset: the release calibration, k centres in every case, progress and
cancellation, utility on a small blob set, input checks and an extreme row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import ClusteringInputError, cluster, lsh_coreset, plan_run
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lsh_tree import MAX_BRANCHING_NODES
from privclust.clustering.methods.lsh_coreset import default_min_count
from privclust.privacy.gdp import noise_multiplier
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import (
    Cancelled,
    ReleaseLog,
    cancelling_at,
    composed_mu,
    refused_field,
)
from tests.support.data import blobs
from tests.support.fixed_noise import scaled
from tests.support.metrics import kmeans_loss

# ---------------------------------------------------------------------------------------------
# Calibration


@pytest.mark.parametrize("n_public", [1190, None])
def test_every_release_is_calibrated_and_they_compose_to_mu(
    log: ReleaseLog, n_public: int | None
) -> None:
    X = blobs(1200, 6, 3)
    result = lsh_coreset(X, 3, radius=2.0, mu=0.8, n_public=n_public, rng=np.random.default_rng(4))
    plan = plan_run(
        result.n_public, 6, 3, algorithm="lsh-coreset", mu=0.8, count_mu=result.count_mu
    )
    # Defaults: 3 bits per level, 7 levels (21 bits), sums priced as 3 x 7 = 21 releases.
    assert (result.algorithm, result.iterations, result.releases) == ("lsh-coreset", 7, 28)
    assert (result.sigma, result.population_size, result.variations) == (plan.sigma, 0, 0)
    calls = log.calls
    if n_public is None:
        # The run's own row count first: a tenth of mu, sensitivity 1, one value.
        assert result.count_mu == pytest.approx(COUNT_MU_FRACTION * 0.8, rel=1e-15)
        assert calls[0] == (1.0, noise_multiplier(result.count_mu, 1), (1,))
        calls = calls[1:]
    else:
        assert (result.count_mu, result.n_public) == (None, 1190)
    assert len(calls) == result.iterations + 1  # one count vector per level, then the sums
    levels, sums = calls[:-1], calls[-1]
    assert all(s == 1.0 and sig == result.sigma for s, sig, _ in levels)
    # The sums: sensitivity R (grid units) scaled by 1/sqrt(21), so their noise std is
    # R sigma / sqrt(21): priced as 21 releases.
    assert sums[:2] == (scaled(grid_sensitivity(6), 21), result.sigma)
    assert sums[2][1] == 6 and sums[2][0] >= 1  # one row of sums per leaf
    true = [1.0] * len(levels) + [grid_sensitivity(6)]
    mu_releases = composed_mu(calls, true)
    assert mu_releases == pytest.approx(math.sqrt(28) / result.sigma, rel=1e-12)
    total = math.hypot(mu_releases, result.count_mu or 0.0)
    assert total <= 0.8 * (1 + 1e-12)
    assert total == pytest.approx(0.8, rel=1e-12)


def test_replace_one_uses_the_exact_count_and_replace_one_sensitivities(
    log: ReleaseLog,
) -> None:
    X = blobs(1000, 5, 4)
    result = lsh_coreset(
        X, 4, radius=2.0, epsilon=1.0, delta=1e-6, relation="replace-one",
        rng=np.random.default_rng(5), bits_per_level=2, iterations=4, sum_weight=5,
    )  # fmt: skip
    assert (result.relation, result.n_public, result.count_mu) == ("replace-one", 1000, None)
    assert (result.iterations, result.releases) == (4, 9)
    assert len(log.calls) == 5
    assert all(s == math.sqrt(2.0) and sig == result.sigma for s, sig, _ in log.calls[:4])
    # Every branching node has 2^2 children: each count vector is a multiple of 4 long.
    assert all(shape[0] % 4 == 0 for _, _, shape in log.calls[:4])
    assert log.calls[-1][:2] == (scaled(2.0 * grid_sensitivity(5), 5), result.sigma)
    true = [math.sqrt(2.0)] * 4 + [2.0 * grid_sensitivity(5)]
    assert composed_mu(log.calls, true) == pytest.approx(result.mu, rel=1e-12)
    with pytest.raises(ClusteringInputError):
        lsh_coreset(X, 4, radius=2.0, mu=0.8, relation="replace-one", n_public=999)


def test_a_tree_that_stops_early_still_makes_every_planned_release(
    log: ReleaseLog,
) -> None:
    # A branching threshold above N~: the root never branches; each level still releases (an
    # empty vector), so the sequence of releases never depends on the data.
    result = lsh_coreset(
        blobs(40, 3, 4), 4, radius=2.0, mu=0.5, n_public=40, branch_count=41,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert len(log.calls) == result.iterations + 1 == 8
    assert [shape for _, _, shape in log.calls[:7]] == [(0,)] * 7
    assert log.calls[-1][2] == (1, 3)  # the root is the only leaf
    # One coreset point for k = 4: the other three centres come from the sphere packing.
    assert result.centers.shape == (4, 3) and len(np.unique(result.centers, axis=0)) == 4


def test_the_plan_prices_the_tree_from_public_inputs() -> None:
    plan = plan_run(20_000, 16, 16, algorithm="lsh-coreset", epsilon=1.0, delta=1e-6)
    assert (plan.iterations, plan.releases, plan.progress_total) == (7, 28, 8)
    assert (plan.variations, plan.population_size) == (0, 0)
    assert plan.sigma == pytest.approx(math.sqrt(28) / plan.mu, rel=1e-12)
    # Google's threshold: min(10 sqrt(d) s, N~/(2k)) with s = sigma / sqrt(21), the sums' noise.
    assert default_min_count(plan, 21) == math.floor(10 * 4 * plan.sigma / math.sqrt(21))
    custom = plan_run(
        500, 4, 2, algorithm="lsh-coreset", mu=1.0, iterations=10, bits_per_level=1, sum_weight=7
    )
    assert (custom.iterations, custom.releases, custom.progress_total) == (10, 17, 11)
    assert default_min_count(custom, 7) == min(
        math.floor(10 * 2 * custom.sigma / math.sqrt(7)), 500 // 4
    )


# ---------------------------------------------------------------------------------------------
# Always k centres


@pytest.mark.parametrize(
    ("X", "k", "n_public"),
    [
        (blobs(12, 3, 2), 10, 12),  # k close to N: the coreset has fewer than k points
        (np.tile([[0.3, -0.2, 0.1]], (500, 1)), 6, 500),  # one distinct row: empty clusters
        (blobs(3000, 4, 3), 3, 3000),
        (blobs(5, 2, 2), 5, 5),  # k = N
    ],
)
def test_always_k_finite_centres_inside_the_ball(X: np.ndarray, k: int, n_public: int) -> None:
    centre = np.full(X.shape[1], 0.25)
    for seed in range(3):
        result = lsh_coreset(
            X, k, radius=1.5, center=centre, mu=1.0, n_public=n_public,
            rng=np.random.default_rng(seed),
        )  # fmt: skip
        assert result.centers.shape == (k, X.shape[1])
        assert np.isfinite(result.centers).all()
        assert (np.linalg.norm(result.centers - centre, axis=1) <= 1.5).all()


# ---------------------------------------------------------------------------------------------
# Progress and cancellation


def test_progress_reports_every_level_and_the_final_step() -> None:
    seen: list[tuple[int, int]] = []
    lsh_coreset(
        blobs(500, 3, 2), 2, radius=2.0, mu=1.0, n_public=500, iterations=4,
        rng=np.random.default_rng(0), progress=lambda t, n: seen.append((t, n)),
    )  # fmt: skip
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


def test_an_exception_from_progress_stops_the_run(log: ReleaseLog) -> None:
    calls: list[int] = []
    progress = cancelling_at(2, calls)
    with pytest.raises(Cancelled):
        cluster(
            blobs(500, 3, 2), 2, algorithm="lsh-coreset", radius=2.0, mu=1.0, n_public=500,
            progress=progress,
        )  # fmt: skip
    assert calls == [1, 2]
    assert len(log.calls) == 2  # nothing is released after the cancellation


# ---------------------------------------------------------------------------------------------
# Utility


def test_loss_on_a_small_blob_set_stays_near_the_optimum() -> None:
    # 3000 rows, 4 well-separated blobs in d = 4, mu = 1: non-private KMeans reaches 0.00995.
    # Over 200 seeds our per-run loss had mean 0.01024, SD 0.00018 and maximum 0.01095; the mean
    # of 5 runs has SD ~0.00007, so the bound 0.011 sits ~11 SDs above it: for a random draw of
    # seeds this test would fail with probability far below 0.1% (no run of 200 exceeded it).
    # The seeds are fixed, so it is deterministic.
    X = blobs(3000, 4, 4)
    losses = [
        kmeans_loss(
            X,
            lsh_coreset(
                X, 4, radius=1.5, mu=1.0, n_public=3000, rng=np.random.default_rng(s)
            ).centers,
        )
        for s in range(5)
    ]
    assert np.mean(losses) <= 0.011


# ---------------------------------------------------------------------------------------------
# Inputs and extreme rows


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bits_per_level": 0}, "bits_per_level"),
        ({"bits_per_level": 13}, "bits_per_level"),
        ({"bits_per_level": 2.0}, "bits_per_level"),
        ({"sum_weight": 0}, "sum_weight"),
        ({"sum_weight": 10**6}, "sum_weight"),
        ({"iterations": 0}, "iterations"),
        ({"iterations": 30, "bits_per_level": 3}, "iterations"),
        ({"min_count": 0}, "min_count"),
        ({"branch_count": -1}, "branch_count"),
        ({"restarts": 0}, "restarts"),
        ({"k": 11, "n_public": 10}, "k"),
    ],
)
def test_invalid_parameters_name_the_field(
    log: ReleaseLog, kwargs: dict[str, object], field: str
) -> None:
    assert refused_field(log, lsh_coreset, kwargs) == field  # refused before any noise


def test_one_extreme_row_never_makes_a_run_fail() -> None:
    # The audit's neighbouring pair: a domain centred at -9.9e99 (the limits allow no further),
    # with and without one row at +1.5e308 (clipped onto the sphere); both runs succeed with k
    # finite centres in the domain.
    rng = np.random.default_rng(12)
    base = np.column_stack([np.full(200, -9.9e99), rng.uniform(-0.5, 0.5, 200)])
    centre = np.array([-9.9e99, 0.0])  # at the domain limits: |c_i| + R <= 1e100
    for X in (base, np.vstack([base, [[1.5e308, 0.0]]])):
        for n_public in (205, None):
            result = cluster(
                X, 2, algorithm="lsh-coreset", radius=1.0, center=centre, mu=1.0,
                n_public=n_public,
            )  # fmt: skip
            assert result.centers.shape == (2, 2) and np.isfinite(result.centers).all()
            assert (np.abs(result.centers[:, 1]) <= 1.0).all()


def test_tiny_thresholds_cannot_grow_an_unbounded_tree(log: ReleaseLog) -> None:
    # min_count = branch_count = 1: most empty children pass on noise alone, and each level
    # would multiply the frontier by ~4; at most MAX_BRANCHING_NODES nodes branch per level.
    result = lsh_coreset(
        blobs(50, 3, 2), 3, radius=2.0, mu=0.3, n_public=50, min_count=1, branch_count=1,
        rng=np.random.default_rng(1),
    )  # fmt: skip
    assert max(shape[0] for _, _, shape in log.calls[:-1]) <= MAX_BRANCHING_NODES * 8
    assert result.centers.shape == (3, 3) and np.isfinite(result.centers).all()
