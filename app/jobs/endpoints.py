"""Clustering jobs: submit (atomic budget charge, then enqueue), estimate, read, list, cancel."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import IntegrityError

from app.datasets import service as datasets_service
from app.jobs import labels as labels_service
from app.jobs import queue
from app.jobs import repository as repo
from app.jobs import service as jobs_service
from app.jobs.schemas import Estimate, JobCreate, JobOut, Privacy
from app.kit.deps import PageCursor, PageLimit, SessionDep, SettingsDep, TenantKey, UnitOfWorkRoute
from app.kit.errors import NotFound, ServiceUnavailable
from app.kit.problems import responses
from app.kit.schemas import Page
from app.ledger import service as ledger
from app.ledger.schemas import Budget
from app.models import Dataset, Job

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=UnitOfWorkRoute)
log = logging.getLogger("privclust.api")

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="Makes retries safe: the same key and body return the same job, charged once.",
    ),
]


def _request_of(body: JobCreate) -> jobs_service.JobRequest:
    params = body.params
    return jobs_service.JobRequest(
        algorithm=body.algorithm,
        k=body.k,
        epsilon=body.epsilon,
        delta=body.delta,
        mu=body.mu,
        iterations=params.iterations if params else None,
        variations=params.variations if params else None,
        projection_dim=params.projection_dim if params else None,
        summaries=body.summaries,
    )


def privacy_of(plan: jobs_service.JobPlan) -> Privacy:
    """The privacy part of a job's estimate (also each job of a sweep's)."""
    return Privacy(
        mu=plan.mu,
        epsilon=plan.epsilon,
        delta=plan.delta,
        sigma=plan.sigma,
        iterations=plan.releases,
        summary_mu=plan.summary_mu,
    )


@router.post(
    "/datasets/{dataset_id}/jobs",
    status_code=202,
    response_model=JobOut,
    responses=responses(401, 403, 404, 409, 422, 503),
    summary="Submit a private clustering job (its budget is charged atomically)",
)
def jobs_create(
    dataset_id: uuid.UUID,
    body: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    req = _request_of(body)
    plan = jobs_service.plan_job(dataset, req)  # invalid parameters: 422 before anything else
    # Refuse cleanly while the queue is down, before anything is charged. The ping may wait for
    # its socket timeout: end the read transaction first, so that no database connection (and
    # no PostgreSQL transaction or SQLite snapshot) is held meanwhile.
    session.commit()
    queue.redis_connection(queue.resolve_redis_url(settings)).ping()
    ledger.begin_budget_transaction(session)
    try:
        job, created = jobs_service.submit(
            session, dataset, req, actor=key.id, idempotency_key=idempotency_key, plan=plan
        )
        session.commit()
    except IntegrityError:
        # uq_jobs_tenant_idempotency_key: a request with the same key committed first (on
        # another dataset, whose lock this one does not share). Replay it, or 409 if the body
        # differs; any other integrity error is not ours to explain.
        session.rollback()
        existing = (
            None
            if idempotency_key is None
            else jobs_service.recheck_idempotency(
                session, key.tenant, idempotency_key, req.fingerprint(dataset.id)
            )
        )
        if existing is None:
            raise
        job, created = existing, False
    if created:
        try:
            queue.enqueue_job(settings, job.id)
        except Exception as exc:
            refunded = jobs_service.fail_unqueued(session, job.id, "the job could not be queued")
            session.commit()
            if refunded:
                raise ServiceUnavailable(
                    "the job queue could not be reached; the job was not "
                    "started and its budget was refunded",
                    code="queue-unavailable",
                    job_id=str(job.id),
                ) from exc
            # The enqueue reached Redis and only its reply was lost: a worker has the job.
            log.warning("job %s: enqueue reported %r, but a worker has taken the job", job.id, exc)
            session.refresh(job)
    else:
        response.headers["Idempotent-Replayed"] = "true"
        session.refresh(job)
    return JobOut.of(job, dataset.columns)


@router.post(
    "/datasets/{dataset_id}/jobs/estimate",
    response_model=Estimate,
    responses=responses(401, 403, 404, 422),
    summary="What a job would cost and the budget after it; charges nothing",
)
def jobs_estimate(
    dataset_id: uuid.UUID, body: JobCreate, session: SessionDep, key: TenantKey
) -> Estimate:
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    est = jobs_service.estimate(session, dataset, _request_of(body))
    return Estimate(
        algorithm=est.plan.algorithm,
        privacy=privacy_of(est.plan),
        admissible=est.admissible,
        budget=Budget.of(est.budget_before),
        budget_after=Budget.of(est.budget_after),
    )


def _job(session: SessionDep, job_id: uuid.UUID, tenant: str) -> tuple[Job, list[str]]:
    """The job and its dataset's column names (one query: clients poll this)."""
    found = repo.job_and_columns_for_tenant(session, job_id, tenant)
    if found is None:
        raise NotFound("no such job", code="job-not-found")
    return found


@router.get("/jobs/{job_id}", response_model=JobOut, responses=responses(401, 403, 404))
def jobs_get(job_id: uuid.UUID, session: SessionDep, key: TenantKey) -> JobOut:
    """A job's status, progress, privacy cost and, once succeeded, its private centres."""
    job, columns = _job(session, job_id, key.tenant)
    return JobOut.of(job, columns)


@router.get("/jobs", response_model=Page[JobOut], responses=responses(401, 403, 422))
def jobs_list(
    session: SessionDep,
    key: TenantKey,
    dataset_id: uuid.UUID | None = None,
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[JobOut]:
    items, nxt = repo.list_jobs(session, key.tenant, limit, cursor, dataset_id, status)
    columns: dict[uuid.UUID, list[str]] = {}
    for job in items:
        if job.dataset_id not in columns:
            ds = session.get(Dataset, job.dataset_id)
            columns[job.dataset_id] = list(ds.columns) if ds else []
    return Page[JobOut](items=[JobOut.of(j, columns[j.dataset_id]) for j in items], next_cursor=nxt)


@router.post(
    "/jobs/{job_id}/cancel", response_model=JobOut, responses=responses(401, 403, 404, 409)
)
def jobs_cancel(job_id: uuid.UUID, session: SessionDep, key: TenantKey) -> JobOut:
    """A queued job is cancelled and refunded; a running job is stopped and stays charged."""
    job, columns = _job(session, job_id, key.tenant)
    ledger.begin_budget_transaction(session)
    job = jobs_service.cancel(session, job, key.id)
    session.commit()
    return JobOut.of(job, columns)


LabelsFormat = Literal["csv", "npy"]


def _labels_format(request: Request, fmt: LabelsFormat | None) -> LabelsFormat:
    """`?format=` wins; else the Accept header (.npy for application/x-npy or
    application/octet-stream); else CSV."""
    if fmt is not None:
        return fmt
    accept = request.headers.get("accept", "")
    if "application/x-npy" in accept or "application/octet-stream" in accept:
        return "npy"
    return "csv"


@router.get(
    "/jobs/{job_id}/labels",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One label per row, in the dataset's row order: the index (0 to "
            "k-1) of the row's nearest released centre.",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-npy": {"schema": {"type": "string", "format": "binary"}},
            },
        },
        **responses(401, 403, 404, 409, 410),
    },
    summary="The owner's labels: each row's nearest released centre (CSV or .npy)",
)
def jobs_labels(
    job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    fmt: Annotated[
        LabelsFormat | None,
        Query(
            alias="format",
            description="`csv` (default) or `npy`; or send Accept: application/x-npy.",
        ),
    ] = None,
) -> StreamingResponse:
    """For the dataset's owner only (anyone else: 404). Computed from the released centres
    (post-processing: no budget) and streamed in blocks. A job that has not succeeded: 409;
    a dataset whose rows were deleted: 410."""
    if key.role != "owner":
        raise NotFound("no such job", code="job-not-found")
    job, _ = _job(session, job_id, key.tenant)
    source = labels_service.open_labels(session, job)
    chosen = _labels_format(request, fmt)
    media = "text/csv" if chosen == "csv" else "application/x-npy"
    return StreamingResponse(
        labels_service.stream(source, chosen),
        media_type=media,
        headers={
            "Content-Disposition": f'attachment; filename="labels-{job.id}.{chosen}"',
            "Vary": "Accept",
        },
    )
