"""The jobs domain's service: the job's whole life, from its estimate to its end.

Its parts: planning (what a job costs), admission (charging the budget and queueing, shared
with sweeps) and lifecycle (every state change after admission, the worker's included). The
routes, the worker, the sweeper and sweeps call the names below; only these modules change a
job's state or write its ledger entries.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from app.datasets import service as datasets_service
from app.datasets.domain import loss_space
from app.jobs import repository as repo
from app.jobs import results
from app.jobs.admission import Admission, Asker, QueueLimits, Submitter
from app.jobs.duration import Duration, PlanFacts, expected_duration
from app.jobs.lifecycle import (
    LOST_WORKER,
    RUNNER_DIED,
    TIMED_OUT,
    JobRun,
    QueuedJob,
    cancel,
    fail_unqueued,
    queued_before,
    still_queued,
    sweep_stale_jobs,
)
from app.jobs.members import tell_members_failed
from app.jobs.planning import (
    JobPlan,
    JobRequest,
    RunRequest,
    budget_choice_error,
    check_ran_as_charged,
    plan_for_target,
    plan_job,
    privacy_error,
    run_options,
    with_estimate_facts,
)
from app.jobs.results import ResultContext
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.kit.config import Settings
from app.kit.errors import Conflict, NotFound, ServiceUnavailable
from app.kit.query import ListQuery
from app.ledger import key_caps
from app.ledger import limits as ledger_limits
from app.ledger import service as ledger
from app.models import Dataset, Job, JobStatus
from privclust.clustering.data.scaling import ORIGINAL_SPACE
from privclust.privacy.cost import release_cost

P = TypeVar("P")  # a job's or a sweep's plan

__all__ = [
    "LOST_WORKER",
    "RUNNER_DIED",
    "TIMED_OUT",
    "Admission",
    "Asker",
    "Estimate",
    "JobPlan",
    "JobRequest",
    "JobRun",
    "QueueLimits",
    "QueuedJob",
    "RunRequest",
    "Submitter",
    "budget_choice_error",
    "cancel",
    "cancel_job",
    "check_ran_as_charged",
    "create_job",
    "estimate",
    "estimate_of",
    "fail_unqueued",
    "get_job",
    "list_jobs",
    "plan_job",
    "privacy_error",
    "queued_before",
    "reserve_job",
    "run_options",
    "still_queued",
    "submit",
    "sweep_stale_jobs",
    "with_estimate_facts",
]


@dataclass(frozen=True)
class Estimate(Generic[P]):
    """What admitting `plan` (a job's or a sweep's) would do: the budget before and after, and
    whether it would be admitted now (else `refused_by`: the limit that would refuse it); with
    the asking key's budget before and after when the key has a cap on the dataset."""

    plan: P
    budget_before: ledger.BudgetView
    budget_after: ledger.BudgetView
    admissible: bool
    loss_space: str = ORIGINAL_SPACE
    refused_by: str | None = None
    key_budget_before: ledger.BudgetView | None = None
    key_budget_after: ledger.BudgetView | None = None
    duration: Duration | None = None


def estimate_of(
    session: Session,
    dataset: Dataset,
    plan: P,
    total_mu: float,
    job_mus: Sequence[float],
    asker: Asker = Asker(),
) -> Estimate[P]:
    """The estimate of admitting `plan`, jobs of `job_mus` composing to `total_mu`, by the
    asker's key at the asker's time: the admission test is `ledger.reserve`'s (every limit:
    app.ledger.limits), on `total_mu`, from the running budgets (constant time). Charges
    nothing."""
    held = ledger_limits.read(session, dataset, asker.key_id, asker.clock.now(), lock=False)
    refused = ledger_limits.refusal(held, total_mu, "")
    now, key_now = held.running, held.key_running
    after, key_after = now, key_now
    if refused is None:
        for mu in job_mus:
            after = after.reserved(mu)
            key_after = None if key_after is None else key_after.reserved(mu)
    key_before, key_after_view = (
        None if k is None else key_caps.key_view(held, k) for k in (key_now, key_after)
    )
    return Estimate(
        plan,
        ledger.view(dataset, now),
        ledger.view(dataset, after),
        refused is None,
        loss_space(dataset),
        None if refused is None else str(refused.extra.get("cap")),
        key_budget_before=key_before,
        key_budget_after=key_after_view,
    )


def estimate(
    session: Session,
    dataset_id: uuid.UUID,
    tenant: str,
    req: JobRequest,
    target: float | None = None,
    asker: Asker = Asker(),
    engine: str = "local",
) -> Estimate[JobPlan]:
    """What the job would cost, what accuracy to expect of it and the budget after it; with a
    `target` centre_std_fraction instead of epsilon/mu, the smallest epsilon that meets it
    (`plan_for_target`). Charges nothing."""
    dataset = datasets_service.get_dataset(session, dataset_id, tenant)
    plan = plan_job(dataset, req) if target is None else plan_for_target(dataset, req, target)
    plan = with_estimate_facts(dataset, plan)
    priced = estimate_of(session, dataset, plan, plan.mu, [plan.mu], asker)
    return replace(priced, duration=job_duration(dataset, plan, engine))


def job_duration(dataset: Dataset, plan: JobPlan, engine: str) -> Duration:
    """How long the planned job will run (app.jobs.duration), from its public facts: the plan
    and the count it was planned with."""
    run, second = plan.run, plan.run.second_start
    facts = PlanFacts(
        algorithm=run.algorithm,
        n_rows=datasets_service.planning_count(dataset).n_rows,
        n_cols=dataset.n_cols,
        k=run.k,
        iterations=run.iterations,
        population_size=run.population_size,
        projection_dim=run.projection_dim,
        # The first chain's steps, then a second start's steps and its two loss passes.
        lloyd_steps=run.lloyd_steps + second + (2 if second else 0),
    )
    return expected_duration(facts, engine)


class JobAdmission(Admission[JobRequest, JobPlan, Job]):
    """A single job's admission (`Admission.run` has the order)."""

    def plan(self) -> JobPlan:
        return plan_job(self.dataset, self.req)

    def job_count(self, plan: JobPlan) -> int:
        return 1

    def reserve(self, session: Session, plan: JobPlan) -> Job:
        return reserve_job(
            session,
            self.dataset,
            plan,
            actor=self.actor,
            idempotency_key=self.idempotency_key,
            fingerprint=self.fingerprint,
            now=self.now,
        )

    def existing(self, session: Session, key: str) -> Job | None:
        return repo.job_by_idempotency_key(session, self.dataset.tenant, key)

    def jobs(self, session: Session, admitted: Job) -> Sequence[Job]:
        return [admitted]

    def not_queued(self, admitted: Job, refunded: int, jobs: int) -> ServiceUnavailable | None:
        if not refunded:
            return None
        return ServiceUnavailable(
            "the job queue could not be reached; the job was not "
            "started and its budget was refunded",
            code="queue-unavailable",
            job_id=str(admitted.id),
        )


def create_job(
    session: Session, settings: Settings, dataset_id: uuid.UUID, req: JobRequest, by: Submitter
) -> tuple[Job, ResultContext, bool]:
    """Admit and enqueue a job: (the job, its dataset's public facts for its result, created).
    created is False when the Idempotency-Key replayed an earlier request (nothing charged
    again)."""
    dataset, job, created = JobAdmission.admit(session, settings, dataset_id, req, by)
    return job, ResultContext.of(dataset), created


def submit(
    session: Session,
    dataset: Dataset,
    req: JobRequest,
    *,
    actor: uuid.UUID | None,
    idempotency_key: str | None,
    plan: JobPlan | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[Job, bool]:
    """Admit a job (reserve its budget) in the current transaction. Returns (job, created).

    `plan` is `plan_job(dataset, req)` when the caller already computed it. The caller must
    start this transaction with `ledger.begin_budget_transaction`, commit, and only then
    enqueue (`create_job` does all of it); idempotency as `Admission.submit` says.
    """
    admission = JobAdmission(dataset, req, actor, idempotency_key, clock=clock)
    return admission.submit(session, plan or admission.plan())


def reserve_job(
    session: Session,
    dataset: Dataset,
    plan: JobPlan,
    *,
    actor: uuid.UUID | None,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
    sweep_id: uuid.UUID | None = None,
    now: datetime | None = None,
) -> Job:
    """Add the queued job of an admitted plan and reserve its budget (BudgetExceeded: nothing
    charged), in the open budget transaction (`Admission.submit`), as of `now` (the
    service's clock: paces)."""
    job = Job(
        id=uuid.uuid4(),
        dataset_id=dataset.id,
        tenant=dataset.tenant,
        algorithm=plan.run.algorithm,
        k=plan.run.k,
        params=plan.params,
        **release_cost(plan),
        iterations=plan.run.iterations,
        status=JobStatus.QUEUED,
        progress_iteration=0,
        progress_total=plan.run.progress_total,
        idempotency_key=idempotency_key,
        request_fingerprint=fingerprint,
        created_by=actor,
        summaries=plan.summary_mu is not None,
        summary_mu=plan.summary_mu,
        sweep_id=sweep_id,
    )
    return ledger.reserve(session, dataset.id, job, actor, now)


def get_job(session: Session, job_id: uuid.UUID, tenant: str) -> tuple[Job, ResultContext]:
    """The tenant's job and its dataset's public facts for its result (column names, domain:
    one query, clients poll this)."""
    found = repo.job_and_context_for_tenant(session, job_id, tenant)
    if found is None:
        raise NotFound("no such job", code="job-not-found")
    return found


def centre_table(
    session: Session, job_id: uuid.UUID, tenant: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """The tenant's succeeded job's centres as a flat table (`results.centre_table`): 409
    `job-not-succeeded` before it has succeeded."""
    job, context = get_job(session, job_id, tenant)
    if job.status != JobStatus.SUCCEEDED or job.centers is None:
        raise Conflict(
            f"the job has no centres yet (it is {job.status})",
            code="job-not-succeeded",
            status_name=job.status,
        )
    return results.centre_table(job, context)


def list_jobs(
    session: Session, query: ListQuery
) -> tuple[list[tuple[Job, ResultContext]], str | None]:
    """A page of the tenant's jobs (newest first), each with its dataset's public facts for
    its result, and the next cursor."""
    items, nxt = repo.list_jobs(session, query)
    contexts: dict[uuid.UUID, ResultContext] = {}
    for job in items:
        if job.dataset_id not in contexts:
            ds = session.get(Dataset, job.dataset_id)
            assert ds is not None  # a job's dataset row is never deleted (only its rows)
            contexts[job.dataset_id] = ResultContext.of(ds)
    return [(job, contexts[job.dataset_id]) for job in items], nxt


def cancel_job(session: Session, job: Job, actor: uuid.UUID | None) -> Job:
    """Cancel in a budget transaction of its own (`cancel`: a queued job is refunded). A
    federated dataset's members are then told a refunded job ended (each refunds its own
    charge, having answered nothing)."""
    ledger.begin_budget_transaction(session)
    queued = job.status == JobStatus.QUEUED
    job = cancel(session, job, actor)
    session.commit()
    if queued and job.status == JobStatus.CANCELLED:
        tell_members_failed(session, job, "was cancelled")
    return job
