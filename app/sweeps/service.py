"""Sweeps over k: one admission of several summarised jobs sharing a total mu, their combined
state, and the suggested k (privclust.clustering.sweeps.suggest_k on the noisy losses)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields, replace
from datetime import datetime

from sqlalchemy.orm import Session

from app.datasets import service as datasets_service
from app.datasets.domain import loss_space
from app.jobs import service as jobs_service
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.errors import Conflict, InvalidParameter, NotFound, ServiceUnavailable
from app.kit.query import ListQuery, body_digest
from app.ledger import limits as ledger_limits
from app.ledger import service as ledger
from app.models import Dataset, Job, JobStatus, Sweep
from app.sweeps import repository as repo
from privclust.clustering import ClusteringInputError, suggest_k
from privclust.clustering.data.scaling import ORIGINAL_SPACE
from privclust.clustering.outputs.uncertainty import Caveat, sweep_warnings
from privclust.clustering.run.options import SWEEP_SUMMARY_FRACTION, BudgetChoiceError
from privclust.clustering.sweeps import plan_sweep as plan_sweep_split
from privclust.privacy import gdp

MAX_KS = 32


@dataclass(frozen=True, kw_only=True)
class SweepRequest(jobs_service.RunRequest):
    ks: tuple[int, ...]

    def fingerprint(self, dataset_id: uuid.UUID) -> str:
        body = {**self.body(dataset_id), "kind": "sweep", "ks": list(self.ks)}
        return body_digest(body)


@dataclass(frozen=True)
class SweepPlan:
    """The sweep's total cost and each job's plan (mu / sqrt(m) each, summaries included)."""

    mu: float
    epsilon: float
    delta: float
    job_mu: float
    jobs: tuple[jobs_service.JobPlan, ...]


def plan_sweep(dataset: Dataset, req: SweepRequest) -> SweepPlan:
    """Validate a sweep and plan its jobs; 422 `invalid-parameter` naming the field, nothing
    charged. Each job is planned exactly as a job asked for mu = job_mu with summaries, at the
    sweeps' summary share (SWEEP_SUMMARY_FRACTION: the losses are what a sweep is for)."""
    if not 2 <= len(req.ks) <= MAX_KS:
        raise InvalidParameter(f"give 2 to {MAX_KS} values of k", field="ks")
    if len(set(req.ks)) != len(req.ks):
        raise InvalidParameter("the values of k must be distinct", field="ks")
    delta = dataset.delta if req.delta is None else req.delta
    try:
        split = plan_sweep_split(
            len(req.ks),
            epsilon=req.epsilon,
            delta=None if req.epsilon is None else delta,
            mu=req.mu,
        )
        epsilon = split.budget.epsilon_at(delta)
    except BudgetChoiceError as exc:
        raise jobs_service.budget_choice_error(exc) from exc
    except gdp.PrivacyParameterError as exc:
        raise jobs_service.privacy_error(exc) from exc
    except ClusteringInputError as exc:  # a mu the request's schema let through
        raise InvalidParameter(str(exc), field=exc.field) from exc
    # Every job asks what the sweep asked of each run (a field RunRequest gains goes along),
    # with the sweep's share of its budget as mu.
    asked = {f.name: getattr(req, f.name) for f in fields(jobs_service.RunRequest)}
    each = jobs_service.JobRequest(
        **{**asked, "epsilon": None, "mu": split.job_mu, "delta": delta},
        summaries=True,
        summary_fraction=SWEEP_SUMMARY_FRACTION,
    )
    plans = []
    for k in sorted(req.ks):
        try:
            plans.append(jobs_service.plan_job(dataset, replace(each, k=k)))
        except InvalidParameter as exc:
            field = "ks" if exc.field == "k" else exc.field
            raise InvalidParameter(f"k={k}: {exc.detail}", field=field) from exc
    return SweepPlan(
        mu=split.mu, epsilon=epsilon, delta=delta, job_mu=split.job_mu, jobs=tuple(plans)
    )


def estimate(
    session: Session,
    dataset_id: uuid.UUID,
    tenant: str,
    req: SweepRequest,
    asker: jobs_service.Asker = jobs_service.Asker(),
) -> jobs_service.Estimate[SweepPlan]:
    """What admitting the sweep would charge and the budget after it; charges nothing.
    Admissible by the same test as `SweepAdmission.reserve`: the whole sweep's mu against what
    is left. A dataset that is not ready: 409 `dataset-not-ready` before the ks are checked."""
    dataset = datasets_service.get_dataset(session, dataset_id, tenant)
    datasets_service.require_ready(dataset)
    plan = plan_sweep(dataset, req)
    jobs = tuple(jobs_service.with_estimate_facts(dataset, job) for job in plan.jobs)
    plan = replace(plan, jobs=jobs)
    job_mus = [j.mu for j in plan.jobs]
    return jobs_service.estimate_of(session, dataset, plan, plan.mu, job_mus, asker)


class SweepAdmission(jobs_service.Admission[SweepRequest, SweepPlan, Sweep]):
    """A sweep's admission, in the same order as a job's (`Admission.run`): every job of the
    sweep, or none. One transaction, one budget check of the whole sweep's mu under the
    dataset's lock, then each job's reservation (as for a single job); any refusal raises
    before commit, so the rollback leaves nothing charged. Idempotency as for a job, with the
    sweep's own keys."""

    def plan(self) -> SweepPlan:
        return plan_sweep(self.dataset, self.req)

    def job_count(self, plan: SweepPlan) -> int:
        return len(plan.jobs)

    def reserve(self, session: Session, plan: SweepPlan) -> Sweep:
        _check_budget(session, self.dataset, plan, self.actor, self.now)
        sweep = kit_repo.add(
            session,
            Sweep(
                id=uuid.uuid4(),
                dataset_id=self.dataset.id,
                tenant=self.dataset.tenant,
                ks=[p.run.k for p in plan.jobs],
                algorithm=self.req.algorithm,
                mu=plan.mu,
                epsilon=plan.epsilon,
                delta=plan.delta,
                job_mu=plan.job_mu,
                idempotency_key=self.idempotency_key,
                request_fingerprint=self.fingerprint,
                created_by=self.actor,
            ),
        )
        for job_plan in plan.jobs:
            jobs_service.reserve_job(
                session, self.dataset, job_plan, actor=self.actor, sweep_id=sweep.id, now=self.now
            )
        return sweep

    def existing(self, session: Session, key: str) -> Sweep | None:
        return repo.sweep_by_idempotency_key(session, self.dataset.tenant, key)

    def jobs(self, session: Session, admitted: Sweep) -> list[Job]:
        return repo.jobs_of_sweep(session, admitted.id)

    def not_queued(self, admitted: Sweep, refunded: int, jobs: int) -> ServiceUnavailable:
        return ServiceUnavailable(
            f"the job queue could not be reached; {refunded} of the sweep's "
            f"{jobs} jobs were not started and their budget was refunded (the "
            "others run as admitted)",
            code="queue-unavailable",
            sweep_id=str(admitted.id),
        )


def create_sweep(
    session: Session,
    settings: Settings,
    dataset_id: uuid.UUID,
    req: SweepRequest,
    by: jobs_service.Submitter,
) -> tuple[SweepState, bool]:
    """Admit and enqueue every job of a sweep: (its state, created). created is False when the
    Idempotency-Key replayed an earlier request (nothing charged again)."""
    _, sweep, created = SweepAdmission.admit(session, settings, dataset_id, req, by)
    return state_of(session, sweep), created


def _check_budget(
    session: Session, dataset: Dataset, plan: SweepPlan, actor: uuid.UUID | None, now: datetime
) -> None:
    """The whole sweep's mu against every limit (the dataset's cap and pace, the key's cap and
    pace), under the budget lock, which reloaded `dataset`; BudgetExceeded (or the subclass
    naming the limit) with nothing charged. Each job's reservation checks its own mu again,
    against the running budgets locked for update."""
    needs = f"this sweep needs mu={plan.mu:.6g} ({len(plan.jobs)} jobs of mu={plan.job_mu:.6g})"
    ledger_limits.refuse(session, dataset, actor, plan.mu, needs, now)


@dataclass(frozen=True)
class SweepState:
    """A sweep with its jobs (in increasing k), its combined status, the suggested k (None
    until every job succeeded, or when the noisy losses cannot tell the ks apart), the
    warnings about it and the space its losses are measured in."""

    sweep: Sweep
    jobs: list[Job]
    status: str
    suggested_k: int | None
    warnings: list[Caveat] = field(default_factory=list)
    loss_space: str = ORIGINAL_SPACE


def state_of(session: Session, sweep: Sweep, jobs: list[Job] | None = None) -> SweepState:
    """The sweep's state from its jobs (read now unless given)."""
    if jobs is None:
        jobs = repo.jobs_of_sweep(session, sweep.id)
    dataset = session.get(Dataset, sweep.dataset_id)
    space = ORIGINAL_SPACE if dataset is None else loss_space(dataset)
    suggested = suggested_k(jobs)
    warnings: list[Caveat] = []
    if finished(jobs):
        warnings = sweep_warnings(*_losses(jobs), suggested)
    return SweepState(sweep, jobs, status_of(jobs), suggested, warnings, space)


def get_sweep(session: Session, sweep_id: uuid.UUID, tenant: str) -> Sweep:
    sweep = repo.sweep_for_tenant(session, sweep_id, tenant)
    if sweep is None:
        raise NotFound("no such sweep", code="sweep-not-found")
    return sweep


def list_sweeps(session: Session, query: ListQuery) -> tuple[list[SweepState], str | None]:
    """A page of the tenant's sweeps (newest first) and the next cursor."""
    items, nxt = repo.list_sweeps(session, query)
    return [state_of(session, sweep, jobs) for sweep, jobs in items], nxt


def status_of(jobs: list[Job]) -> str:
    """The sweep's state from its jobs' (see SweepOut.status)."""
    statuses = {j.status for j in jobs}
    if statuses == {JobStatus.SUCCEEDED}:
        return JobStatus.SUCCEEDED
    if statuses == {JobStatus.QUEUED}:
        return JobStatus.QUEUED
    if statuses & {JobStatus.QUEUED, JobStatus.RUNNING}:
        return JobStatus.RUNNING
    return JobStatus.FAILED if JobStatus.FAILED in statuses else JobStatus.CANCELLED


def finished(jobs: list[Job]) -> bool:
    """Whether every job of the sweep succeeded with its private loss."""
    return bool(jobs) and all(j.status == JobStatus.SUCCEEDED and j.loss is not None for j in jobs)


def _losses(jobs: list[Job]) -> tuple[list[int], list[float], list[float]]:
    return (
        [j.k for j in jobs],
        [float(j.loss) if j.loss is not None else 0.0 for j in jobs],
        [float(j.loss_se) if j.loss_se is not None else 0.0 for j in jobs],
    )


def suggested_k(jobs: list[Job]) -> int | None:
    """The elbow of the released losses once every job succeeded (post-processing); None
    before, or when the noisy losses cannot tell the ks apart (privclust.clustering.sweeps)."""
    if not finished(jobs):
        return None
    return suggest_k(*_losses(jobs))


def cancel(
    session: Session, sweep_id: uuid.UUID, tenant: str, actor: uuid.UUID | None
) -> SweepState:
    """Cancel every job of the sweep that has not finished (queued: refunded; running:
    stopped, stays charged), in a budget transaction of its own. 409 when all of them had
    already finished."""
    sweep = get_sweep(session, sweep_id, tenant)
    ledger.begin_budget_transaction(session)
    jobs = repo.jobs_of_sweep(session, sweep.id)
    live = [j for j in jobs if j.status in (JobStatus.QUEUED, JobStatus.RUNNING)]
    if not live:
        raise Conflict("every job of the sweep has already finished", code="sweep-finished")
    for job in live:
        try:
            jobs_service.cancel(session, job, actor)
        except Conflict:  # it finished meanwhile
            continue
    session.commit()
    return state_of(session, sweep)
