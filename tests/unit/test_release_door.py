"""Every release of a run goes through its rows' one door (`Rows.release`), and what passes it
is what the run's plan scheduled: for every method, with and without summaries, with a public
count (on a ball and on a box, under add/remove and replace-one) and without one (the run
releases its own first), the releases match the plan's schedule entry by entry (what, how
many, l2 sensitivity, noise std as drawn), and the schedule composes to the plan's mu."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from privclust.clustering import cluster, plan_run
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import PartitionedTable
from privclust.clustering.mechanisms.candidates import second_start_steps
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.run.plan import RunPlan
from privclust.clustering.run.schedule import (
    CLUSTER_LOSSES,
    LLOYD_STEP,
    LOSS,
    NOISY_COUNTS,
    NOISY_SUMS,
    ROW_COUNT,
    SIZES,
    TREE_COUNTS,
    VOTE_HISTOGRAM,
    composed_mu,
    loss_sensitivity,
)
from privclust.privacy.noise import count_sigma, noise_std
from tests.support.clustering import RecordingEngine, ReleaseLog, joint_sensitivity
from tests.support.dask import blocks
from tests.support.data import blobs

ALGORITHMS = ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]
N, D, K, N_PUBLIC = 600, 3, 3, 590
# What each pass the rows' door sees releases, array by array.
RELEASED = {
    "RowCount": (ROW_COUNT,),
    "VoteCounts": (VOTE_HISTOGRAM,),
    "ChildCounts": (TREE_COUNTS,),
    "LeafSums": (NOISY_SUMS,),
    "ProjectedClusterSums": (NOISY_SUMS, NOISY_COUNTS),
    "JointLloydSums": (LLOYD_STEP,),
    "SummaryCounts": (SIZES, LOSS),
    "ClusterLosses": (CLUSTER_LOSSES,),
}


def _sensitivity(what: str, plan: RunPlan) -> float:
    """The l2 sensitivity of a release of `what`, worked out here from the relation and d."""
    count = plan.count_sensitivity
    return {
        ROW_COUNT: 1.0,
        VOTE_HISTOGRAM: count,
        TREE_COUNTS: count,
        NOISY_COUNTS: count,
        SIZES: count,
        NOISY_SUMS: plan.sum_sensitivity_factor * grid_sensitivity(D),
        LLOYD_STEP: joint_sensitivity(D, plan.relation),
        LOSS: loss_sensitivity(),
        CLUSTER_LOSSES: count * loss_sensitivity(),
    }[what]


def _run(algorithm: str, summaries: bool, count: str) -> tuple[RecordingEngine, RunPlan, Any]:
    """A run through a recording engine and the plan `plan_run` makes of it from public
    inputs: a public count N~ (on a ball, or on a box), N itself (replace-one), or none (the
    plan is then made with the count the run released and the mu it spent on it)."""
    X = blobs(N, D, K, seed=3)
    where: dict[str, Any] = {"radius": 1.0}
    if count == "box":
        X, where = X * 50.0 + 50.0, {"lower": [0.0] * D, "upper": [100.0] * D}
    public = {
        "ball": {"n_public": N_PUBLIC},
        "box": {"n_public": N_PUBLIC},
        "replace-one": {"relation": "replace-one"},
        "own": {},
    }[count]
    engine = RecordingEngine()
    table = PartitionedTable(blocks(X, 250), D, engine)
    privacy = {"epsilon": 1.0, "delta": 1e-6, "summaries": summaries}
    result = cluster(
        table, K, algorithm=algorithm, rng=np.random.default_rng(5), **privacy, **public, **where
    )
    planned: dict[str, Any] = {"relation": public.get("relation", "add-remove")}
    if count == "own":
        assert result.count_mu is not None
        planned["count_mu"] = result.count_mu
    plan = plan_run(result.n_public, D, K, algorithm=algorithm, **privacy, **planned)
    assert (result.algorithm, result.releases, result.sigma) == (
        plan.algorithm,
        plan.releases,
        plan.sigma,
    )
    return engine, plan, result


def _assert_released_as_scheduled(
    engine: RecordingEngine, plan: RunPlan, drawn: ReleaseLog
) -> None:
    """The schedule, one entry per array (what, and the noise the door is asked for), is what
    passed the door, in order; the std each array's noise was drawn with is the schedule's."""
    expected = [(e.what, e.noise, e.std) for e in plan.schedule for _ in range(e.times)]
    released = [
        (what, g)
        for r in engine.releases
        for what, g in zip(RELEASED[r.statistic], r.noises, strict=True)
    ]
    assert [(what, g) for what, g, _ in expected] == released
    assert [noise_std(s, sigma) for s, sigma, _ in drawn.calls] == [std for *_, std in expected]


@pytest.mark.parametrize("count", ["ball", "box", "replace-one", "own"])
@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_release_passes_the_rows_door_as_the_plan_scheduled_it(
    algorithm: str, summaries: bool, count: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = ReleaseLog(monkeypatch)
    engine, plan, result = _run(algorithm, summaries, count)
    _assert_released_as_scheduled(engine, plan, drawn)
    # Each entry's sensitivity is its statistic's; its std that sensitivity times its sigma
    # over the root of its weight; the method's releases share the plan's sigma and their
    # weights add up to the plan's releases.
    for entry in plan.schedule:
        assert entry.sensitivity == _sensitivity(entry.what, plan), entry
        exact = (Fraction(entry.sensitivity) * Fraction(entry.sigma)) ** 2 / entry.weight
        # Rounded up when the weight is 1; a weight's float division (Gaussian.
        # scaled_sensitivity) may leave the std an ulp or two below the exact quotient.
        slack = 1 if entry.weight == 1 else 1 - Fraction(1, 2**49)
        assert Fraction(entry.std) ** 2 >= exact * slack, entry
    centres = [e for e in plan.schedule if e.what not in (ROW_COUNT, SIZES, LOSS)]
    assert all(e.sigma == plan.sigma for e in centres)
    assert sum(e.times * e.weight for e in centres) == plan.releases
    assert plan.lloyd_steps + plan.second_start == sum(
        e.times for e in centres if e.what == LLOYD_STEP
    )
    # The run's own count comes first, the summaries last, each only when the run has them.
    whats = [e.what for e in plan.schedule]
    assert (whats[0] == ROW_COUNT) == (count == "own") == (ROW_COUNT in whats)
    if count == "own":
        assert plan.schedule[0].noise == Gaussian(1.0, count_sigma(result.count_mu))
    assert (whats[-2:] == [SIZES, LOSS]) == summaries == (plan.summary_mu is not None)
    # The schedule composes (GDP) to the plan's mu: never above it (exactly), below it only
    # by the rounding of sigma and of the budget's splits.
    spent = sum((e.mu_squared for e in plan.schedule), Fraction(0))
    assert spent <= Fraction(plan.mu) ** 2
    assert composed_mu(plan.schedule) == pytest.approx(plan.mu, rel=1e-12)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_units_schedule_composes_to_its_per_row_share(algorithm: str) -> None:
    # A unit of up to m rows: every release is calibrated per row, at the unit's mu / m.
    m = 3
    plan = plan_run(5000, D, K, algorithm=algorithm, mu=1.5, summaries=True, contribution_bound=m)
    spent = sum((e.mu_squared for e in plan.schedule), Fraction(0))
    assert m**2 * spent <= Fraction(plan.mu) ** 2
    assert m * composed_mu(plan.schedule) == pytest.approx(plan.mu, rel=1e-12)


def test_a_second_starts_releases_pass_the_door_as_the_plan_scheduled_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where mu N~ / k allows a second, split-merge start (mechanisms.candidates), its Lloyd
    steps and the two chains' loss releases are in the schedule, in the order the run makes
    them, at the plan's one sigma."""
    mu = 6.0  # mu N~ / k = 6 * 590 / 3 = 1,180: a second start
    assert second_start_steps(N_PUBLIC, K, mu, None) > 0
    drawn = ReleaseLog(monkeypatch)
    engine = RecordingEngine()
    table = PartitionedTable(blocks(blobs(N, D, K, seed=3), 250), D, engine)
    result = cluster(
        table, K, algorithm="pe-lloyd", mu=mu, radius=1.0, n_public=N_PUBLIC,
        rng=np.random.default_rng(8),
    )  # fmt: skip
    plan = plan_run(N_PUBLIC, D, K, algorithm="pe-lloyd", mu=mu)
    assert result.releases == plan.releases and plan.second_start > 0
    whats = [e.what for e in plan.schedule]
    assert whats == [VOTE_HISTOGRAM, LLOYD_STEP, CLUSTER_LOSSES, LLOYD_STEP, CLUSTER_LOSSES]
    _assert_released_as_scheduled(engine, plan, drawn)
    for entry in plan.schedule:
        assert entry.sensitivity == _sensitivity(entry.what, plan), entry
        assert entry.sigma == plan.sigma
    assert plan.lloyd_steps + plan.second_start == sum(
        e.times for e in plan.schedule if e.what == LLOYD_STEP
    )
    spent = sum((e.mu_squared for e in plan.schedule), Fraction(0))
    assert spent <= Fraction(plan.mu) ** 2
    assert composed_mu(plan.schedule) == pytest.approx(plan.mu, rel=1e-12)
