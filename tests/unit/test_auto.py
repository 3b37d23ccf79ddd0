"""`auto`: the rule sees only public facts, the plan and the run agree on its pick, the result
names it, and a library run that releases its own count still spends exactly the job's mu."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import ALGORITHMS, choose_algorithm, cluster, plan_run
from privclust.clustering.mechanisms.lloyd import iterations_cap
from privclust.clustering.run.plan import default_pe_iterations
from privclust.privacy.gdp import mu_from_epsilon_delta, noise_multiplier
from privclust.privacy.noise import COUNT_MU_FRACTION
from tests.support.clustering import ReleaseLog
from tests.support.data import blobs

FACTS = [
    (n, d, k, mu)
    for n in (150, 20_000, 1_000_000)
    for d in (2, 4, 16, 32, 33, 64, 300)
    for k in (2, 4, 16, 64)
    for mu in (0.03, 0.28, 0.95, 1.7, 10.0)
    if k <= n
]


def test_the_rule_picks_a_concrete_method_for_any_public_facts() -> None:
    concrete = set(ALGORITHMS) - {"auto"}
    for n, d, k, mu in FACTS:
        pick = choose_algorithm(n, d, k, mu)
        assert pick in concrete
        # The planner resolves "auto" to the same pick, from the same facts.
        assert plan_run(n, d, k, algorithm="auto", mu=mu, variations=4).algorithm == pick


@pytest.mark.parametrize(("d", "k"), [(3, 2), (40, 3)])
def test_the_result_names_the_method_that_ran(d: int, k: int) -> None:
    X = blobs(600, d, k)
    result = cluster(X, k, algorithm="auto", radius=1.5, mu=1.0, n_public=590, iterations=3,
                     rng=np.random.default_rng(1))  # fmt: skip
    assert result.algorithm == choose_algorithm(590, d, k, 1.0)
    assert (result.n_public, result.count_mu, result.mu) == (590, None, 1.0)


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_without_a_public_count_auto_pays_for_it_and_spends_exactly_mu(
    log: ReleaseLog, epsilon: float
) -> None:
    X = blobs(800, 4, 3)
    delta = 1e-6
    result = cluster(X, 3, algorithm="auto", radius=1.5, epsilon=epsilon, delta=delta,
                     rng=np.random.default_rng(2))  # fmt: skip
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert (result.mu, result.epsilon, result.delta) == (mu, epsilon, delta)
    assert result.count_mu == pytest.approx(COUNT_MU_FRACTION * mu, rel=1e-15)
    # The count first (sensitivity 1, a tenth of mu), then the chosen method's releases.
    assert log.calls[0] == (1.0, noise_multiplier(result.count_mu, 1), (1,))
    assert abs(result.n_public - 800) < 6 / result.count_mu
    assert result.algorithm == choose_algorithm(result.n_public, 4, 3, mu)
    mu_releases = math.sqrt(result.releases) / result.sigma
    assert math.hypot(mu_releases, result.count_mu) <= mu * (1 + 1e-12)
    assert math.hypot(mu_releases, result.count_mu) == pytest.approx(mu, rel=1e-9)
    # The method ran exactly the plan a direct call with this epsilon makes (PE-means scales its
    # T with epsilon): same T, releases and sigma.
    direct = plan_run(
        result.n_public, 4, 3, algorithm=result.algorithm, epsilon=epsilon, delta=delta,
        count_mu=result.count_mu,
    )  # fmt: skip
    assert (result.iterations, result.releases) == (direct.iterations, direct.releases)
    assert result.sigma == pytest.approx(direct.sigma, rel=1e-12)
    if result.algorithm == "pe-means":
        assert result.iterations == default_pe_iterations(4, epsilon)
    if result.algorithm == "pe-lloyd":  # the same T up to its cap
        assert result.iterations == min(default_pe_iterations(4, epsilon), iterations_cap(4))


def test_auto_refuses_bad_arguments_before_any_noise(log: ReleaseLog) -> None:
    X = blobs(100, 3, 2)
    with pytest.raises(ValueError):
        cluster(X, 2, algorithm="auto", radius=1.5, epsilon=1.0)  # no delta
    with pytest.raises(ValueError):
        cluster(X, 2, algorithm="auto", radius=1.5, mu=1.0, variations=10_000)
    assert log.calls == []


def test_auto_runs_pe_lloyd_at_every_dimension_and_budget() -> None:
    from privclust.clustering import AUTO_ALGORITHM

    assert AUTO_ALGORITHM == "pe-lloyd"
    for n, d, k, mu in FACTS:
        assert choose_algorithm(n, d, k, mu) == AUTO_ALGORITHM
    # Above 16 columns pe-lloyd searches in a 16-dimensional projection: the plan says so.
    assert plan_run(20_000, 16, 16, algorithm="auto", mu=0.3).projection_dim is None
    wide = plan_run(20_000, 17, 16, algorithm="auto", mu=0.3)
    assert (wide.algorithm, wide.projection_dim, wide.iterations) == ("pe-lloyd", 16, 14)


def test_with_summaries_the_run_uses_the_plan_made_on_the_whole_mu() -> None:
    # The planner prices the job from the whole mu; the run sees the centres' part of it: the
    # two must still agree on the method, its releases and its noise (the service's worker
    # refuses a run that differs).
    X = blobs(600, 40, 3)
    plan = plan_run(590, 40, 3, algorithm="auto", mu=0.9, summaries=True)
    result = cluster(X, 3, algorithm="auto", radius=1.5, mu=0.9, n_public=590, summaries=True,
                     rng=np.random.default_rng(3))  # fmt: skip
    assert plan.algorithm == result.algorithm == "pe-lloyd"
    assert (plan.releases, plan.sigma) == (result.releases, result.sigma)
