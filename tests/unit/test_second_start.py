"""pe-lloyd's second start (privclust.clustering.mechanisms.candidates): when it is planned, the
split-merge move it starts from, and the per-cluster loss it reads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import plan_run
from privclust.clustering.data.rows import Part
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.mechanisms.candidates import (
    SECOND_START_STEPS,
    SPLIT_SPREADS,
    SWITCH_Z,
    ClusterLosses,
    loss_clip,
    losses_noise,
    second_is_better,
    second_start_steps,
    split_merge,
)
from privclust.clustering.run.schedule import LOSS_GRID_BITS


def test_a_second_start_is_planned_from_public_facts_only() -> None:
    assert second_start_steps(400_000, 4, 0.01, None) == SECOND_START_STEPS  # mu N~/k = 1,000
    assert second_start_steps(399_000, 4, 0.01, None) == 0
    assert second_start_steps(10**6, 2, 1.0, None) == 0  # nothing to merge besides the split
    # A job keeps what it was planned with: none (admitted before the second start), or its
    # steps whatever its mu N~ / k.
    assert second_start_steps(10**6, 4, 1.0, 0) == 0
    assert second_start_steps(100, 4, 0.01, 7) == 7
    with pytest.raises(ClusteringInputError):
        second_start_steps(100, 4, 0.01, 11)


def test_the_split_merge_start_merges_the_cheapest_pair_and_splits_the_costliest_cluster() -> None:
    # Two short-haul centres 0.1 apart (Ward cost 100 * 100 / 200 * 0.01 = 0.5), one far
    # centre, and the cluster with the most loss (index 3, 50 rows, loss 2.0).
    centres = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.5], [0.5, 0.5]])
    counts = np.array([100.0, 300.0, 100.0, 50.0])
    losses = np.array([0.1, 0.2, 0.1, 2.0])
    out = split_merge(centres, counts, losses, 10.0, np.random.default_rng(0))
    np.testing.assert_allclose(out[0], [0.075, 0.0])  # the count-weighted mean of 0 and 1
    np.testing.assert_array_equal(out[2], centres[2])
    # The freed centre and the costliest one on either side of it, at SPLIT_SPREADS times its
    # per-column rms spread sqrt(2.0 / (50 * 2)) = 0.141.
    np.testing.assert_allclose((out[1] + out[3]) / 2, centres[3], atol=1e-12)
    half = float(np.linalg.norm(out[1] - centres[3]))
    assert half == pytest.approx(SPLIT_SPREADS * math.sqrt(2.0 / 100.0))


def test_each_clusters_loss_sum_is_its_rows_clipped_squared_distances_on_the_grid() -> None:
    rows = np.array([[0.0, 0.0], [0.0, 0.25], [1.0, 1.0], [3.0, 1.0]])
    centres = np.array([[0.0, 0.0], [1.0, 1.0]])
    (sums,) = ClusterLosses(centres, 1.0)(Part(rows))
    # Cluster 0: 0 + 0.0625; cluster 1: 0 + min(4, 1) (clipped at the bound).
    np.testing.assert_array_equal(sums, [round(0.0625 * 2**LOSS_GRID_BITS), 2**LOSS_GRID_BITS])
    assert sums.dtype == np.int64


def test_the_loss_clip_is_the_largest_gap_between_the_first_chains_centres() -> None:
    centres = np.array([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4]])
    # Nearest-other distances 0.3, 0.3 and 0.4: the clip is 0.4^2, far below R^2 = 4.
    assert loss_clip(centres, 2.0) == pytest.approx(0.16)
    assert loss_clip(np.zeros((3, 2)), 2.0) == pytest.approx((2e-3) ** 2)  # coinciding centres
    assert loss_clip(np.array([[-5.0, 0.0], [5.0, 0.0], [5.0, 1.0]]), 2.0) == 4.0  # at most R^2


def test_the_second_chain_wins_only_beyond_twice_the_noise_of_the_difference() -> None:
    plan = plan_run(10_000, 2, 3, algorithm="pe-lloyd", mu=1.0)
    bound, weight = 0.25, 1
    noise = losses_noise(plan, weight)
    std = noise.scaled_sensitivity * noise.sigma * bound * 2.0**-LOSS_GRID_BITS
    margin = SWITCH_Z * std * math.sqrt(2 * 3)
    first = np.array([10.0, 20.0, 30.0])
    below = first - np.array([0.0, 0.0, 1.01 * margin])
    level = first - np.array([0.0, 0.0, 0.99 * margin])
    assert second_is_better(first, below, bound, plan, weight)
    assert not second_is_better(first, level, bound, plan, weight)
