"""Real tables in the library: per-column bounds (the scaled space), the service's domain limits
in every entry point, the accuracy expected before spending, and warnings where a noisy figure
says nothing."""

from __future__ import annotations

import numpy as np
import pytest

from privclust import PrivateKMeans
from privclust.clustering import ClusteringInputError, cluster, plan_run, suggest_k, sweep
from privclust.clustering.data.scaling import Box
from privclust.clustering.outputs.accuracy import Space, expected_accuracy, smallest_epsilon
from privclust.clustering.outputs.summaries import nearest_centre_blocks
from privclust.clustering.outputs.uncertainty import domain_warnings, ks_told_apart, loss_warnings
from tests.support.data import CUSTOMER_LOWER as LOWER
from tests.support.data import CUSTOMER_UPPER as UPPER
from tests.support.data import customers as mixed_units


def test_a_box_clusters_each_column_on_its_own_scale_and_answers_in_its_units() -> None:
    X, labels = mixed_units(6000, 1)
    result = cluster(
        X, 3, lower=LOWER, upper=UPPER, mu=1.0, n_public=6000, summaries=True,
        rng=np.random.default_rng(2),
    )  # fmt: skip
    exact = np.array([np.clip(X, LOWER, UPPER)[labels == j].mean(axis=0) for j in range(3)])
    nearest = [np.argmin(np.abs(exact - c).sum(axis=1)) for c in result.centers]
    error = np.abs(result.centers - exact[nearest]) / (UPPER - LOWER)
    assert sorted(nearest) == [0, 1, 2] and error.max() < 0.02
    assert result.loss_space == "scaled" and 0 < result.loss < 0.05
    # The centres in the scaled space are the released ones mapped by the public bounds.
    np.testing.assert_allclose(
        result.scaled_centers * (UPPER - LOWER) + LOWER, result.centers, rtol=1e-12
    )
    # Labels compare rows and centres in the same scaled space.
    labels_out = np.concatenate(
        list(nearest_centre_blocks(X, result.centers, lower=LOWER, upper=UPPER))
    )
    assert labels_out.shape == (6000,) and set(labels_out) == {0, 1, 2}


def test_rows_outside_the_box_are_clipped_into_it_column_by_column() -> None:
    X = np.array([[-50.0, 500.0], [10.0, 10.0]] * 50)
    result = cluster(X, 1, lower=[0, 0], upper=[20, 20], mu=5.0, n_public=100)
    assert np.all(result.centers >= 0) and np.all(result.centers <= 20)


@pytest.mark.parametrize(
    ("domain", "field"),
    [
        ({"radius": 1e101}, "radius"),
        ({"radius": 1e-101}, "radius"),
        ({"radius": 1e90, "center": [1e100, 0.0]}, "center"),
        ({"lower": [-1e101, 0.0], "upper": [0.0, 1.0]}, "lower"),
        ({"lower": [0.0, 0.0], "upper": [1.0, 2e100]}, "upper"),
        ({"lower": [0.0, 1.0], "upper": [1.0, 0.0]}, "upper"),
        ({"lower": [0.0, 0.0], "upper": [1e-101, 0.0]}, "upper"),
        ({"lower": [0.0, 0.0], "upper": [1.0, 1.0], "radius": 1.0}, "radius"),
    ],
)
def test_every_entry_point_refuses_a_domain_outside_the_services_limits(
    domain: dict, field: str
) -> None:
    X = np.zeros((50, 2))
    calls = [
        lambda: cluster(X, 2, mu=1.0, n_public=50, **domain),
        lambda: sweep(X, [2, 3], mu=1.0, n_public=50, **domain),
        lambda: list(nearest_centre_blocks(X, np.zeros((2, 2)), **domain)),
    ]
    for call in calls:
        with pytest.raises(ClusteringInputError) as caught:
            call()
        assert caught.value.field == field
    estimator = PrivateKMeans(n_clusters=2, count_public=True, **domain)
    with pytest.raises(ValueError):
        estimator.fit(X)


def test_the_estimator_takes_bounds_columns_and_summaries(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, _ = mixed_units(3000, 3)
    table = pa.table({name: X[:, j] for j, name in enumerate(["age", "income", "visits", "spend"])})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    model = PrivateKMeans(
        n_clusters=3, epsilon=2.0, lower=LOWER[[0, 3]], upper=UPPER[[0, 3]],
        columns=["age", "spend"], summaries=True,
    ).fit(path)  # fmt: skip
    assert model.cluster_centers_.shape == (3, 2)
    assert model.sizes_ is not None and model.sizes_se_ is not None and model.sizes_se_ > 0
    assert model.loss_ is not None and model.loss_se_ is not None
    assert model.loss_space_ == "scaled" and isinstance(model.warnings_, list)
    assert model.privacy_["n_rows_dp"] is not None


def test_the_estimator_refuses_k_above_the_noisy_row_count() -> None:
    # 20 rows and 50 centres: the noisy count (std 10 at mu 1) is never near 50.
    with pytest.raises(ClusteringInputError, match="noisy row count"):
        PrivateKMeans(n_clusters=50, epsilon=5.0, radius=5.0).fit(np.zeros((20, 2)))


def test_the_expected_accuracy_reads_the_plans_noise() -> None:
    space = Space.box(Box.of(LOWER, UPPER))
    plan = plan_run(60_000, 4, 3, algorithm="fastlloyd", epsilon=1.0, delta=1e-6)
    accuracy = expected_accuracy(plan, space)
    # Every column gets the same fraction of its own range; its std is that times the range.
    fractions = np.array(accuracy.centre_std_fraction)
    np.testing.assert_allclose(fractions, fractions[0])
    np.testing.assert_allclose(accuracy.centre_std, fractions * (UPPER - LOWER))
    assert accuracy.basis == "final-mean-release" and accuracy.loss_se is None
    # More budget, less noise; more rows, less noise.
    better = expected_accuracy(plan_run(60_000, 4, 3, algorithm="fastlloyd", epsilon=4.0,
                                        delta=1e-6), space)  # fmt: skip
    assert better.worst_fraction < accuracy.worst_fraction


def test_a_target_accuracy_gives_the_smallest_epsilon_that_meets_it() -> None:
    space = Space.box(Box.of(LOWER, UPPER))

    def plan_at(epsilon: float):
        return plan_run(20_000, 4, 3, epsilon=epsilon, delta=1e-6, summaries=True)

    epsilon, plan = smallest_epsilon(0.002, plan_at, space)
    assert expected_accuracy(plan, space).worst_fraction <= 0.002
    assert expected_accuracy(plan_at(epsilon * 0.97), space).worst_fraction > 0.002
    with pytest.raises(ClusteringInputError) as caught:
        smallest_epsilon(1e-12, plan_at, space)
    assert caught.value.field == "target_centre_std_fraction"


def test_a_sweep_whose_losses_noise_alone_explains_suggests_no_k() -> None:
    # The sweep: every error bar overlaps every other.
    losses, ses = [4616.0, 0.0, 2425.0, 0.0, 2541.0], [3000.0] * 5
    assert not ks_told_apart(losses, ses)
    assert suggest_k([2, 3, 4, 5, 6], losses, ses) is None
    # Clearly separated losses still give the elbow.
    assert suggest_k([2, 3, 4], [10.0, 2.0, 1.9], [0.1, 0.1, 0.1]) == 3


def test_a_noise_dominated_library_sweep_says_why() -> None:
    # A few thousand rows with bounds 100 times looser than the data: the losses are noise.
    X, _ = mixed_units(3000, 5)
    result = sweep(
        X, [2, 3, 4, 5], lower=LOWER - 50 * (UPPER - LOWER), upper=UPPER + 50 * (UPPER - LOWER),
        epsilon=1.0, delta=1e-6, n_public=3000, rng=np.random.default_rng(7),
    )  # fmt: skip
    assert result.suggested_k is None
    assert [w.code for w in result.warnings] == ["sweep-inconclusive"]


def test_warnings_name_what_is_not_informative() -> None:
    assert [w.code for w in loss_warnings(0.01, 0.02)] == ["loss-not-informative"]
    assert loss_warnings(1.0, 0.02) == []
    tight = np.array([[0.50, 0.5], [0.52, 0.51]])
    assert [w.code for w in domain_warnings(tight, np.zeros(2), np.ones(2))] == ["domain-loose"]
    spread = np.array([[0.1, 0.5], [0.9, 0.51]])
    assert domain_warnings(spread, np.zeros(2), np.ones(2)) == []
    # A centre whose noisy size is below noise does not count: its position is mostly noise.
    stray = np.array([[0.50, 0.5], [0.52, 0.51], [0.95, 0.05]])
    sizes, se = np.array([900.0, 1100.0, 3.0]), 10.0
    codes = [w.code for w in domain_warnings(stray, np.zeros(2), np.ones(2), sizes, se)]
    assert codes == ["domain-loose"]
    assert domain_warnings(stray, np.zeros(2), np.ones(2)) == []
    assert domain_warnings(stray, np.zeros(2), np.ones(2), np.array([900, 5, 5]), se) == []
