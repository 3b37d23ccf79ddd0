"""Sweeps over k: one atomic admission of a summarised job per k, their losses and a suggested k."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response
from sqlalchemy.exc import IntegrityError

from app.datasets import service as datasets_service
from app.jobs import queue
from app.jobs import service as jobs_service
from app.jobs.endpoints import IdempotencyKey, privacy_of
from app.kit.deps import PageCursor, PageLimit, SessionDep, SettingsDep, TenantKey, UnitOfWorkRoute
from app.kit.errors import ServiceUnavailable
from app.kit.problems import responses
from app.kit.schemas import Page
from app.ledger import service as ledger
from app.ledger.schemas import Budget
from app.models import Job, Sweep
from app.sweeps import repository as repo
from app.sweeps import service as sweeps_service
from app.sweeps.schemas import SweepCreate, SweepEstimate, SweepJobEstimate, SweepOut, SweepPrivacy

router = APIRouter(prefix="/v1", tags=["sweeps"], route_class=UnitOfWorkRoute)


def _request_of(body: SweepCreate) -> sweeps_service.SweepRequest:
    params = body.params
    return sweeps_service.SweepRequest(
        ks=tuple(body.ks),
        algorithm=body.algorithm,
        epsilon=body.epsilon,
        delta=body.delta,
        mu=body.mu,
        iterations=params.iterations if params else None,
        variations=params.variations if params else None,
        projection_dim=params.projection_dim if params else None,
    )


def _out(session: SessionDep, sweep: Sweep, jobs: list[Job] | None = None) -> SweepOut:
    if jobs is None:
        jobs = repo.jobs_of_sweep(session, sweep.id)
    return SweepOut.of(
        sweep, jobs, sweeps_service.suggested_k(jobs), sweeps_service.status_of(jobs)
    )


@router.post(
    "/datasets/{dataset_id}/sweeps",
    status_code=202,
    response_model=SweepOut,
    responses=responses(401, 403, 404, 409, 422, 503),
    summary="Run one summarised job per k, admitted and charged atomically as one",
)
def sweeps_create(
    dataset_id: uuid.UUID,
    body: SweepCreate,
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> SweepOut:
    """The whole sweep's epsilon (or mu) is split equally between its jobs (each mu/sqrt(m));
    all of them are admitted, or none (409 `budget-exceeded`, nothing charged)."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    req = _request_of(body)
    plan = sweeps_service.plan_sweep(dataset, req)  # 422 before anything else
    queue.redis_connection(queue.resolve_redis_url(settings)).ping()
    ledger.begin_budget_transaction(session)
    try:
        sweep, created = sweeps_service.submit(
            session, dataset, req, actor=key.id, idempotency_key=idempotency_key, plan=plan
        )
        session.commit()
    except IntegrityError:
        # uq_sweeps_tenant_idempotency_key: the same key committed first on another dataset.
        session.rollback()
        existing = (
            None
            if idempotency_key is None
            else sweeps_service.recheck_idempotency(
                session, key.tenant, idempotency_key, req.fingerprint(dataset.id)
            )
        )
        if existing is None:
            raise
        sweep, created = existing, False
    if created:
        jobs = repo.jobs_of_sweep(session, sweep.id)
        for position, job in enumerate(jobs):
            try:
                queue.enqueue_job(settings, job.id)
            except Exception as exc:
                # This job and the ones after it never reached the queue: fail and refund them
                # (no noise drawn); those already queued run as admitted.
                refunded = sum(
                    jobs_service.fail_unqueued(session, unqueued.id, "the job could not be queued")
                    for unqueued in jobs[position:]
                )
                session.commit()
                raise ServiceUnavailable(
                    f"the job queue could not be reached; {refunded} of the sweep's "
                    f"{len(jobs)} jobs were not started and their budget was refunded (the "
                    "others run as admitted)",
                    code="queue-unavailable",
                    sweep_id=str(sweep.id),
                ) from exc
    else:
        response.headers["Idempotent-Replayed"] = "true"
    return _out(session, sweep)


@router.post(
    "/datasets/{dataset_id}/sweeps/estimate",
    response_model=SweepEstimate,
    responses=responses(401, 403, 404, 422),
    summary="What a sweep would cost, each job's plan and the budget after it; charges nothing",
)
def sweeps_estimate(
    dataset_id: uuid.UUID, body: SweepCreate, session: SessionDep, key: TenantKey
) -> SweepEstimate:
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    est = sweeps_service.estimate(session, dataset, _request_of(body))
    plan = est.plan
    return SweepEstimate(
        privacy=SweepPrivacy(
            mu=plan.mu, epsilon=plan.epsilon, delta=plan.delta, job_mu=plan.job_mu
        ),
        jobs=[
            SweepJobEstimate(k=j.k, algorithm=j.algorithm, privacy=privacy_of(j)) for j in plan.jobs
        ],
        admissible=est.admissible,
        budget=Budget.of(est.budget_before),
        budget_after=Budget.of(est.budget_after),
    )


@router.get("/sweeps", response_model=Page[SweepOut], responses=responses(401, 403, 422))
def sweeps_list(
    session: SessionDep,
    key: TenantKey,
    dataset_id: uuid.UUID | None = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[SweepOut]:
    """The tenant's sweeps, newest first, optionally of one dataset."""
    items, nxt = repo.list_sweeps(session, key.tenant, limit, cursor, dataset_id)
    return Page[SweepOut](items=[_out(session, s, jobs) for s, jobs in items], next_cursor=nxt)


@router.get("/sweeps/{sweep_id}", response_model=SweepOut, responses=responses(401, 403, 404))
def sweeps_get(sweep_id: uuid.UUID, session: SessionDep, key: TenantKey) -> SweepOut:
    """Each k's private loss and its standard error, the progress over all jobs, and the
    suggested k once every job succeeded."""
    return _out(session, sweeps_service.get_sweep(session, sweep_id, key.tenant))


@router.post(
    "/sweeps/{sweep_id}/cancel", response_model=SweepOut, responses=responses(401, 403, 404, 409)
)
def sweeps_cancel(sweep_id: uuid.UUID, session: SessionDep, key: TenantKey) -> SweepOut:
    """Cancel every unfinished job: queued ones are refunded, running ones stop and stay
    charged."""
    sweep = sweeps_service.get_sweep(session, sweep_id, key.tenant)
    ledger.begin_budget_transaction(session)
    sweeps_service.cancel(session, sweep, key.id)
    session.commit()
    return _out(session, sweep)
