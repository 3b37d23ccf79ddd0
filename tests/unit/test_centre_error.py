"""The centre-error band (noise and segmentation), a sweep that suggests no k from losses that
rise with k, and the library's own noisy count floored at 0."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.cluster import KMeans

from privclust.clustering import ClusteringInputError, cluster, plan_run, suggest_k
from privclust.clustering.data.scaling import Box
from privclust.clustering.outputs.accuracy import (
    Space,
    expected_accuracy,
    released_accuracy,
    result_accuracy,
)
from privclust.clustering.outputs.centre_error import (
    UNIFORM_STD,
    Z90,
    contested_share,
    domain_spread,
    loss_spread,
)
from privclust.clustering.outputs.uncertainty import sweep_warnings
from privclust.clustering.run.runner import counted_rows, released_count
from privclust.clustering.sweeps import elbow_k


def test_domain_spread_is_that_of_k_cubes_filling_the_domain() -> None:
    assert domain_spread(0.0, 1, 1) == pytest.approx(UNIFORM_STD)
    # The unit square in 4 squares of side 1/2.
    assert domain_spread(0.0, 2, 4) == pytest.approx(0.5 * UNIFORM_STD)


def test_loss_spread_reads_the_loss_high_by_its_noise_and_floors_it() -> None:
    assert loss_spread(0.04, 0.0, 4) == pytest.approx(0.1)
    assert loss_spread(0.04, 0.01, 4) == pytest.approx(math.sqrt((0.04 + Z90 * 0.01) / 4))
    assert loss_spread(-1.0, 0.01, 4) == 0.0
    for bad in (math.nan, math.inf):
        with pytest.raises(ArithmeticError):
            loss_spread(bad, 0.01, 4)


def test_the_estimate_band_holds_the_noise_and_the_domain_spread() -> None:
    box = Box.of([0.0, 0.0, 0.0], [10.0, 200.0, 1.0])
    space = Space.box(box)
    plan = plan_run(5000, 3, 4, epsilon=1.0, delta=1e-6, summaries=True)
    accuracy = expected_accuracy(plan, space)
    fractions = np.asarray(accuracy.centre_error_fraction)
    assert accuracy.spread_from == "domain"
    assert np.all(fractions >= Z90 * np.asarray(accuracy.centre_std_fraction))
    assert np.allclose(
        fractions, math.hypot(Z90 * accuracy.centre_std_fraction[0], 4 ** (-1 / 3) * UNIFORM_STD)
    )
    # In each column's units: the same fraction of its range.
    assert np.allclose(np.asarray(accuracy.centre_error), fractions * box.widths)


def test_a_result_band_reads_its_released_loss() -> None:
    space = Space.box(Box.of([0.0, 0.0], [1.0, 100.0]))
    plan = plan_run(5000, 2, 3, epsilon=1.0, delta=1e-6, summaries=True)
    planned = expected_accuracy(plan, space)
    tight = released_accuracy(planned, space, 0.0002, 0.0)
    loose = released_accuracy(planned, space, 0.02, 0.0)
    assert tight.spread_from == loose.spread_from == "loss"
    assert max(tight.centre_error_fraction) < max(loose.centre_error_fraction)
    assert max(loose.centre_error_fraction) == pytest.approx(
        math.hypot(Z90 * planned.centre_std_fraction[0], 0.1)
    )
    assert released_accuracy(planned, space, None, None) == planned  # no loss: the estimate's


def test_the_contested_share_is_that_of_normal_clusters_spread_along_their_gap() -> None:
    # Two centres 1 apart in 2 columns, per-column spread 0.5: radius 0.5 sqrt(2), and the
    # share past the midpoint is Phi(-1 / (2 radius)) = Phi(-0.7071), over 1/2.
    pair = np.array([[0.0, 0.0], [1.0, 0.0]])
    assert contested_share(pair, 0.5) == pytest.approx(0.4795001221869535)
    # Only the nearest pair counts, in any direction.
    assert contested_share(np.array([[0.0, 0.0], [0.6, 0.8], [5.0, 5.0]]), 0.5) == (
        pytest.approx(contested_share(pair, 0.5))
    )
    assert contested_share(np.array([[0.0, 0.0], [3.0, 0.0]]), 0.5) == pytest.approx(
        0.0338949, rel=1e-5
    )  # 2 Phi(-2.1213)
    # Coincident centres, a single centre, no spread: all of it.
    assert contested_share(np.zeros((2, 3)), 0.1) == 1.0
    assert contested_share(np.zeros((1, 3)), 0.1) == 1.0
    assert contested_share(pair, 0.0) == 1.0
    for bad in (math.nan, math.inf):
        with pytest.raises(ArithmeticError):
            contested_share(np.array([[0.0, 0.0], [bad, 0.0]]), 0.5)
        with pytest.raises(ArithmeticError):
            contested_share(pair, bad)


def test_a_result_band_narrows_its_spread_by_the_released_centres_separation() -> None:
    box = Box.of([0.0, 0.0], [1.0, 100.0])
    space = Space.box(box)
    planned = expected_accuracy(
        plan_run(5000, 2, 3, epsilon=1.0, delta=1e-6, summaries=True), space
    )
    noise = Z90 * planned.centre_std_fraction[0]
    # Loss 0.02 over 2 columns: spread 0.1, radius 0.1 sqrt(2); centres 0.3 apart in the
    # scaled space (0.3 of each column's range in its own units).
    centres = box.to_original(np.array([[0.1, 0.1], [0.1, 0.4], [0.9, 0.9]]))
    apart = released_accuracy(planned, space, 0.02, 0.0, centres)
    share = math.erfc(0.3 / (2 * 0.1 * math.sqrt(2)) / math.sqrt(2))
    assert share == pytest.approx(0.2888443663464849)
    assert np.allclose(apart.centre_error_fraction, math.hypot(noise, 0.1 * math.sqrt(share)))
    assert np.allclose(apart.centre_error, np.asarray(apart.centre_error_fraction) * box.widths)
    # Without centres, or with two that coincide, the whole spread: the wider band.
    whole = math.hypot(noise, 0.1)
    assert np.allclose(released_accuracy(planned, space, 0.02, 0.0).centre_error_fraction, whole)
    merged = box.to_original(np.array([[0.1, 0.1], [0.1, 0.1], [0.9, 0.9]]))
    together = released_accuracy(planned, space, 0.02, 0.0, merged)
    assert np.allclose(together.centre_error_fraction, whole)


def test_a_library_result_band_contains_its_centres_distance_to_kmeans() -> None:
    # Three well-separated blobs in a box: the band contains each centre's distance to
    # KMeans'. Fixed seeds (the run's noise is seeded by the test only).
    rng = np.random.default_rng(3)
    means = np.array([[2.0, 20.0], [5.0, 80.0], [8.0, 40.0]])
    X = np.clip(means[rng.integers(0, 3, 3000)] + rng.normal(size=(3000, 2)) * [0.5, 5.0], 0, 100)
    result = cluster(
        X, 3, lower=[0, 0], upper=[10, 100], n_public=3000, epsilon=2.0, delta=1e-6,
        summaries=True, rng=np.random.default_rng(11),
    )  # fmt: skip
    band = np.asarray(result_accuracy(result, Space.box(Box.of([0, 0], [10, 100]))).centre_error)
    box = Box.of([0, 0], [10, 100])  # KMeans in the scaled space, where the job clusters
    exact = box.to_original(
        KMeans(3, n_init=10, random_state=0).fit(box.to_scaled(X)).cluster_centers_
    )
    centres = np.asarray(result.centers)
    nearest = centres[((exact[:, None] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)]
    errors = np.abs(nearest - exact)
    assert np.mean(errors <= band) >= 5 / 6  # a 90% band: here 5 of the 6 distances


def test_a_sweep_whose_losses_rise_with_k_suggests_none() -> None:
    ks, ses = [2, 3, 4, 5, 6], [0.05] * 5
    wine = [0.17, 0.34, 0.47, 0.86, 1.07]  # the wine sweep
    assert suggest_k(ks, wine, ses) is None
    assert [c.code for c in sweep_warnings(ks, wine, ses, None)] == ["sweep-loss-rises"]
    # Falling losses still give the elbow, and say it depends on the budget.
    falling = [1.0, 0.5, 0.1, 0.095, 0.09]
    assert suggest_k(ks, falling, [0.002] * 5) == 4
    codes = [c.code for c in sweep_warnings(ks, falling, ses, 4)]
    assert codes == ["suggested-k-budget"]
    # With errors of 0.03 they still fall clearly, but whether 4 -> 5 -> 6 drops by 20% is
    # the noise's to decide: no k, and the sweep says why.
    wide = [0.03] * 5
    assert suggest_k(ks, falling, wide) is None
    codes = [c.code for c in sweep_warnings(ks, falling, wide, None)]
    assert codes == ["sweep-elbow-unclear"]


def test_noise_that_decides_only_between_k_and_k_plus_one_still_suggests_k() -> None:
    # Three blobs swept over 2, 3, 4 (the README's sweep): k = 3 is far below k = 2, and
    # whether 4 drops 20% below 3 is within the noise. Both readings of the rule give 3 or 4,
    # so 3 is suggested, with the warning that it may move with the budget.
    ks, losses, ses = [2, 3, 4], [12.6, 1.4, 1.2], [0.34] * 3
    assert elbow_k(ks, losses, ses) == 3 and elbow_k(ks, losses, ses, against_noise=True) == 4
    assert suggest_k(ks, losses, ses) == 3
    assert [c.code for c in sweep_warnings(ks, losses, ses, 3)] == ["suggested-k-budget"]
    # The same losses over 2, 4, 8: the noise decides between 4 and 8, two ks apart: none.
    assert suggest_k([2, 4, 8], losses, ses) is None


def test_the_library_count_is_floored_at_zero() -> None:
    # A count of 0 rows with a tiny mu: the noise is often negative; the released count never is.
    for seed in range(20):
        with pytest.raises(ClusteringInputError) as refused:
            no_rows = counted_rows(np.empty((0, 2)))
            released_count(no_rows, 10**9, 0.05, np.random.default_rng(seed), check_k=True)
        assert "n_rows_dp=-" not in str(refused.value)
