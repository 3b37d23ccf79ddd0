"""Every release of a run goes through its rows' one door (`Rows.release`), and what passes it
is what the run's plan priced: for every method, with and without summaries, on a ball and on
a box, the releases' noise multipliers, weights and sensitivities add up to the plan; a run
without a public count releases its own first, through the same door."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privclust.clustering import cluster, plan_run
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import PartitionedTable
from privclust.clustering.mechanisms.candidates import second_start_steps
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.run.plan import RunPlan
from privclust.clustering.run.summary_pricing import loss_sensitivity
from privclust.privacy.noise import count_sigma
from tests.support.clustering import RecordingEngine, Released, joint_sensitivity
from tests.support.dask import blocks
from tests.support.data import blobs

ALGORITHMS = ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]
N, D, K, N_PUBLIC = 600, 3, 3, 590


def _sensitivities(plan: RunPlan) -> dict[str, tuple[float, ...]]:
    """The l2 sensitivity of each array of each statistic a run releases, from its plan."""
    count, sums = plan.count_sensitivity, plan.sum_sensitivity_factor * grid_sensitivity(D)
    return {
        "VoteCounts": (count,),
        "ChildCounts": (count,),
        "LeafSums": (sums,),
        "ProjectedClusterSums": (sums, count),
        "JointLloydSums": (joint_sensitivity(D),),
        "ClusterLosses": (loss_sensitivity(),),
    }


def _mu(releases: list[Released]) -> float:
    """What the releases compose to (GDP: the root of the sum of squares)."""
    return math.sqrt(sum(g.mu**2 for r in releases for g in r.noises))


def _run(algorithm: str, summaries: bool, domain: str) -> tuple[list[Released], RunPlan]:
    X = blobs(N, D, K, seed=3)
    if domain == "box":
        X, where = X * 50.0 + 50.0, {"lower": [0.0] * D, "upper": [100.0] * D}
    else:
        where = {"radius": 1.0}
    engine = RecordingEngine()
    table = PartitionedTable(blocks(X, 250), D, engine)
    privacy = {"epsilon": 1.0, "delta": 1e-6, "summaries": summaries}
    result = cluster(
        table,
        K,
        algorithm=algorithm,
        n_public=N_PUBLIC,
        rng=np.random.default_rng(5),
        **privacy,
        **where,
    )
    plan = plan_run(N_PUBLIC, D, K, algorithm=algorithm, **privacy)
    assert result.algorithm == plan.algorithm and result.releases == plan.releases
    return engine.releases, plan


@pytest.mark.parametrize("domain", ["ball", "box"])
@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_release_passes_the_rows_door_as_the_plan_priced_it(
    algorithm: str, summaries: bool, domain: str
) -> None:
    releases, plan = _run(algorithm, summaries, domain)
    centres = [r for r in releases if r.statistic != "SummaryCounts"]
    summary = [r for r in releases if r.statistic == "SummaryCounts"]
    # The centres: every release at the plan's one sigma, their weights the plan's count of
    # releases, each array calibrated to its statistic's sensitivity.
    expected = _sensitivities(plan)
    for r in centres:
        assert tuple(g.sensitivity for g in r.noises) == expected[r.statistic], r
        assert all(g.sigma == plan.sigma for g in r.noises)
    assert sum(g.weight for r in centres for g in r.noises) == plan.releases
    assert _mu(centres) == pytest.approx(math.sqrt(plan.releases) / plan.sigma, rel=1e-12)
    # The summaries: one pass, two releases (sizes, loss), last, spending the plan's share.
    if summaries:
        assert releases[-1:] == summary
        (sizes, loss) = summary[0].noises
        assert (sizes.sensitivity, loss.sensitivity) == (plan.count_sensitivity, loss_sensitivity())
        assert summary[0].shapes == ((K,), (1,))
        assert plan.summary_mu is not None
        assert _mu(summary) == pytest.approx(plan.summary_mu, rel=1e-12)
    else:
        assert summary == []
    # The whole run spends at most the job's mu (all of it, up to the plan's rounding).
    assert _mu(releases) <= plan.mu * (1 + 1e-12)
    assert _mu(releases) == pytest.approx(plan.mu, rel=1e-3)


@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_runs_own_row_count_passes_the_door_first(algorithm: str, summaries: bool) -> None:
    engine = RecordingEngine()
    table = PartitionedTable(blocks(blobs(N, D, K, seed=4), 250), D, engine)
    result = cluster(
        table,
        K,
        algorithm=algorithm,
        mu=1.0,
        radius=1.0,
        summaries=summaries,
        rng=np.random.default_rng(6),
    )
    first, rest = engine.releases[0], engine.releases[1:]
    assert result.count_mu is not None
    assert first == Released("RowCount", (Gaussian(1.0, count_sigma(result.count_mu)),), ((1,),))
    assert all(r.statistic != "RowCount" for r in rest)
    centres = [r for r in rest if r.statistic != "SummaryCounts"]
    assert sum(g.weight for r in centres for g in r.noises) == result.releases
    assert _mu(engine.releases) <= 1.0 + 1e-12
    assert _mu(engine.releases) == pytest.approx(1.0, rel=1e-3)


def test_a_second_starts_loss_releases_pass_the_door_as_the_plan_priced_them() -> None:
    """Where mu N~ / k allows a second, split-merge start (mechanisms.candidates), its Lloyd
    steps and the two chains' loss releases are all in the plan, at its one sigma."""
    mu = 6.0  # mu N~ / k = 6 * 590 / 3 = 1,180: a second start
    assert second_start_steps(N_PUBLIC, K, mu, None) > 0
    engine = RecordingEngine()
    table = PartitionedTable(blocks(blobs(N, D, K, seed=3), 250), D, engine)
    result = cluster(
        table, K, algorithm="pe-lloyd", mu=mu, radius=1.0, n_public=N_PUBLIC,
        rng=np.random.default_rng(8),
    )  # fmt: skip
    plan = plan_run(N_PUBLIC, D, K, algorithm="pe-lloyd", mu=mu)
    assert result.releases == plan.releases
    losses = [r for r in engine.releases if r.statistic == "ClusterLosses"]
    assert len(losses) == 2 and all(r.shapes == ((K,),) for r in losses)
    for r in engine.releases:
        assert tuple(g.sensitivity for g in r.noises) == _sensitivities(plan)[r.statistic], r
        assert all(g.sigma == plan.sigma for g in r.noises)
    assert sum(g.weight for r in engine.releases for g in r.noises) == plan.releases
    assert _mu(engine.releases) <= plan.mu * (1 + 1e-12)
    assert _mu(engine.releases) == pytest.approx(plan.mu, rel=1e-3)
