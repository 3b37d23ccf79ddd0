"""A pe-lloyd job keeps its Lloyd steps with its parameters, so that a change of the default
(more steps from the capped T on) never re-plans a job admitted before it differently."""

from __future__ import annotations

from app.jobs.planning import run_options
from app.models import Job
from privclust.clustering import plan_run
from privclust.clustering.mechanisms.lloyd import default_lloyd_steps, iterations_cap


def _job(params: dict[str, object], iterations: int, mu: float = 2.0) -> Job:
    return Job(algorithm="pe-lloyd", mu=mu, iterations=iterations, params=params, summaries=False)


def test_a_job_admitted_before_the_steps_were_kept_replans_with_one_step() -> None:
    old = _job({"iterations": 80}, 80)  # epsilon 10 at d = 5 under the old default T
    assert run_options(old)["lloyd_steps"] == 1
    plan = plan_run(10_000, 5, 4, **run_options(old))
    assert plan.releases == 80 + 1 * round(0.1 * 80 / 0.9)  # T votes, one step of weight w


def test_a_new_job_keeps_the_steps_its_plan_took() -> None:
    planned = plan_run(10_000, 5, 4, algorithm="pe-lloyd", epsilon=10.0, delta=1e-6)
    assert planned.iterations == iterations_cap(5)
    steps = default_lloyd_steps(planned.iterations, 5)
    assert steps > 1
    new = _job({"lloyd_steps": steps}, planned.iterations, planned.mu)
    assert plan_run(10_000, 5, 4, **run_options(new)).releases == planned.releases
