"""A pe-lloyd job keeps its Lloyd steps with its parameters, so that a change of the default
(more steps from the capped T on) never re-plans a job admitted before it differently."""

from __future__ import annotations

from app.jobs.planning import _lloyd_steps, run_options
from app.models import Job
from privclust.clustering import plan_run
from privclust.clustering.mechanisms.candidates import SECOND_START_STEPS
from privclust.clustering.mechanisms.lloyd import default_lloyd_steps, iterations_cap


def _job(params: dict[str, object], iterations: int, mu: float = 2.0) -> Job:
    return Job(algorithm="pe-lloyd", mu=mu, iterations=iterations, params=params, summaries=False)


def test_a_job_admitted_before_the_steps_were_kept_replans_with_one_step() -> None:
    old = _job({"iterations": 80}, 80)  # epsilon 10 at d = 5 under the old default T
    assert run_options(old)["lloyd_steps"] == 1
    plan = plan_run(10_000, 5, 4, **run_options(old))
    assert plan.releases == 80 + 1 * round(0.1 * 80 / 0.9)  # T votes, one step of weight w


def test_a_new_job_keeps_the_steps_its_plan_took() -> None:
    # mu N~ / k = 600: no second start, so PE-means' T reaches its cap.
    planned = plan_run(1_000, 5, 4, algorithm="pe-lloyd", epsilon=10.0, delta=1e-6)
    assert planned.second_start == 0
    assert planned.iterations == iterations_cap(5)
    steps = default_lloyd_steps(planned.iterations, 5, 1_000, 4, planned.mu)
    assert steps > 1
    new = _job({"lloyd_steps": steps}, planned.iterations, planned.mu)
    assert plan_run(1_000, 5, 4, **run_options(new)).releases == planned.releases


def test_more_rows_per_cluster_and_budget_buy_more_lloyd_steps_from_public_facts() -> None:
    # Below the capped T: one step, unless mu N~ / k reaches 100 per step (at most 10).
    assert default_lloyd_steps(8, 5, 178, 3, 0.3) == 1
    assert default_lloyd_steps(8, 5, 54_000, 6, 0.26) == 10  # mu N~/k = 2,340
    assert default_lloyd_steps(8, 5, 3_000, 4, 0.4) == 3  # 300
    # At the capped T: four steps, or more on the same rule.
    assert default_lloyd_steps(16, 5, 342, 3, 2.5) == 4
    assert default_lloyd_steps(16, 5, 327_346, 4, 1.8) == 10
    # The plan prices them: T votes and ten steps of weight w, fixed before any noise.
    planned = plan_run(327_346, 5, 4, algorithm="pe-lloyd", epsilon=1.0, delta=1e-7)
    steps = default_lloyd_steps(planned.iterations, 5, 327_346, 4, planned.mu)
    assert steps == 10 and planned.second_start == SECOND_START_STEPS  # mu N~/k = 20,000
    assert planned.progress_total == planned.iterations + 10 + SECOND_START_STEPS


def test_a_job_keeps_its_second_start_and_one_admitted_before_it_replans_without() -> None:
    planned = plan_run(327_346, 5, 4, algorithm="pe-lloyd", epsilon=1.0, delta=1e-7)
    assert planned.second_start > 0
    params = {"lloyd_steps": 10, "second_start": planned.second_start}
    # What a job keeps: the first chain's steps apart from the second start's.
    assert _lloyd_steps(planned) == 10
    new = _job(params, planned.iterations, planned.mu)
    assert plan_run(327_346, 5, 4, **run_options(new)).releases == planned.releases
    old = _job({"lloyd_steps": 10}, planned.iterations, planned.mu)
    assert run_options(old)["second_start"] == 0
    replanned = plan_run(327_346, 5, 4, **run_options(old))
    assert replanned.second_start == 0
    assert replanned.releases == planned.iterations + 10 * round(0.1 * planned.iterations / 0.9)
