"""Clustering jobs: submit (atomic budget charge, then enqueue), estimate, read, list, cancel."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, Protocol

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from app.jobs import labels as labels_service
from app.jobs import service as jobs_service
from app.jobs.schemas import (
    Accuracy,
    CentreRow,
    Duration,
    Estimate,
    JobCreate,
    JobEstimateRequest,
    JobOut,
    JobParams,
    Privacy,
    StatusName,
)
from app.keys.auth import TenantKey
from app.kit.clock import Clock
from app.kit.deps import (
    ClockDep,
    PageCursor,
    PageLimit,
    SessionDep,
    SettingsDep,
    UnitOfWorkRoute,
)
from app.kit.errors import NotFound
from app.kit.problems import responses
from app.kit.query import ListQuery
from app.kit.schemas import Page
from app.kit.tables import TableFormat, table_response, table_responses
from app.ledger.schemas import Budget
from app.models import ApiKey, Role

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=UnitOfWorkRoute)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="Makes retries safe: the same key and body return the same job, charged once.",
    ),
]


@dataclass(frozen=True)
class Submission:
    """A submission's Idempotency-Key at the edge: the header it came with, the clock it is
    admitted by, and the response whose `Idempotent-Replayed` header says when the key
    replayed a request admitted before (nothing charged again)."""

    idempotency_key: str | None
    clock: Clock
    response: Response

    def by(self, key: ApiKey) -> jobs_service.Submitter:
        """Who submits: `key`'s tenant and id, with this request's Idempotency-Key."""
        return jobs_service.Submitter(key.tenant, key.id, self.idempotency_key, self.clock)

    def answered(self, created: bool) -> None:
        if not created:
            self.response.headers["Idempotent-Replayed"] = "true"


def _submission(
    clock: ClockDep, response: Response, idempotency_key: IdempotencyKey = None
) -> Submission:
    return Submission(idempotency_key, clock, response)


SubmissionDep = Annotated[Submission, Depends(_submission)]
# What a route that admits work answers: 202 once admitted; 409 over a budget, 429 over the
# queue's caps, 503 while the queue is down (nothing charged).
ADMITS: dict[str, Any] = {
    "status_code": 202,
    "responses": responses(401, 403, 404, 409, 422, 429, 503),
}


def _request_of(body: JobCreate) -> jobs_service.JobRequest:
    return jobs_service.JobRequest(k=body.k, summaries=body.summaries, **run_fields(body))


class RunBody(Protocol):
    """What a job's and a sweep's bodies ask of each run."""

    algorithm: str
    epsilon: float | None
    delta: float | None
    mu: float | None
    params: JobParams | None


def run_fields(body: RunBody) -> dict[str, Any]:
    """A job's or a sweep's `RunRequest` fields from its body: the method, the budget and the
    method's parameters (each None when not given)."""
    names = ("iterations", "variations", "projection_dim")
    params = {name: getattr(body.params, name) if body.params else None for name in names}
    return {
        "algorithm": body.algorithm,
        "epsilon": body.epsilon,
        "delta": body.delta,
        "mu": body.mu,
        **params,
    }


def budget_verdict(est: jobs_service.Estimate[Any]) -> dict[str, Any]:
    """A job's or a sweep's estimate on the budget: whether it would be admitted now (else the
    limit that would refuse it), and the dataset's budget and the asking key's before and after
    it."""
    return {
        "admissible": est.admissible,
        "budget": Budget.of(est.budget_before),
        "budget_after": Budget.of(est.budget_after),
        "refused_by": est.refused_by,
        "key_budget": Budget.maybe(est.key_budget_before),
        "key_budget_after": Budget.maybe(est.key_budget_after),
    }


@router.post(
    "/datasets/{dataset_id}/jobs",
    response_model=JobOut,
    summary="Submit a private clustering job (its budget is charged atomically)",
    **ADMITS,
)
def jobs_create(
    dataset_id: uuid.UUID,
    body: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    submission: SubmissionDep,
) -> JobOut:
    req = _request_of(body)
    job, context, created = jobs_service.create_job(
        session, settings, dataset_id, req, submission.by(key)
    )
    submission.answered(created)
    return JobOut.of(job, context, key.role)


@router.post(
    "/datasets/{dataset_id}/jobs/estimate",
    response_model=Estimate,
    responses=responses(401, 403, 404, 409, 422),
    summary="What a job would cost and the budget after it; charges nothing",
)
def jobs_estimate(
    dataset_id: uuid.UUID,
    body: JobEstimateRequest,
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    clock: ClockDep,
) -> Estimate:
    """The job's cost, the accuracy to expect of it (from public facts only) and the budget
    after it. With `target_centre_std_fraction` instead of `epsilon`/`mu`: the smallest
    epsilon (and its mu) whose expected accuracy meets it."""
    asker = jobs_service.Asker(key.id, clock)
    target = body.target_centre_std_fraction
    engine = "local" if settings.dask_scheduler is None else "dask"
    est = jobs_service.estimate(
        session, dataset_id, key.tenant, _request_of(body), target, asker, engine
    )
    assert est.plan.accuracy is not None and est.duration is not None
    return Estimate(
        algorithm=est.plan.run.algorithm,
        privacy=Privacy.of(est.plan),
        accuracy=Accuracy.of(est.plan.accuracy, est.loss_space),
        duration=Duration(**asdict(est.duration)),
        protects=est.plan.protects,
        **budget_verdict(est),
    )


@router.get("/jobs/{job_id}", response_model=JobOut, responses=responses(401, 403, 404))
def jobs_get(job_id: uuid.UUID, session: SessionDep, key: TenantKey) -> JobOut:
    """A job's status, progress, privacy cost and, once succeeded, its private centres."""
    job, context = jobs_service.get_job(session, job_id, key.tenant)
    return JobOut.of(job, context, key.role)


@router.get(
    "/jobs/{job_id}/centres",
    response_model=list[CentreRow],
    responses=table_responses("One row per released centre.", 401, 403, 404, 409, 422),
    summary="A succeeded job's centres as a flat table (JSON rows or CSV), for dashboards",
)
def jobs_centres(
    job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    fmt: TableFormat = None,
) -> Response:
    """The same numbers as `result.centers` (and `sizes`, `sizes_se`), one row per centre;
    reading them spends nothing. 409 `job-not-succeeded` until the job has succeeded."""
    columns, rows = jobs_service.centre_table(session, job_id, key.tenant)
    return table_response(request, fmt, rows, columns)


@router.get("/jobs", response_model=Page[JobOut], responses=responses(401, 403, 422))
def jobs_list(
    session: SessionDep,
    key: TenantKey,
    dataset_id: uuid.UUID | None = None,
    status: StatusName | None = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[JobOut]:
    query = ListQuery(key.tenant, limit, cursor, dataset_id, status)
    items, nxt = jobs_service.list_jobs(session, query)
    return Page[JobOut](
        items=[JobOut.of(job, context, key.role) for job, context in items], next_cursor=nxt
    )


@router.post(
    "/jobs/{job_id}/cancel", response_model=JobOut, responses=responses(401, 403, 404, 409)
)
def jobs_cancel(job_id: uuid.UUID, session: SessionDep, key: TenantKey) -> JobOut:
    """A queued job is cancelled and refunded; a running job is stopped and stays charged."""
    job, context = jobs_service.get_job(session, job_id, key.tenant)
    job = jobs_service.cancel_job(session, job, key.id)
    return JobOut.of(job, context, key.role)


LabelsFormat = Literal["csv", "npy"]
LabelsQuery = Annotated[
    LabelsFormat | None,
    Query(
        alias="format", description="`csv` (default) or `npy`; or send Accept: application/x-npy."
    ),
]
# A labels route's answers: the stream, and the problems of `labels_response`'s source.
LABELS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "One label per row, in the dataset's row order: the index (0 to "
        "k-1) of the row's nearest released centre.",
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            "application/x-npy": {"schema": {"type": "string", "format": "binary"}},
        },
    },
    **responses(401, 403, 404, 409, 410),
}


def _labels_format(request: Request, fmt: LabelsFormat | None) -> LabelsFormat:
    """`?format=` wins; else the Accept header (.npy for application/x-npy or
    application/octet-stream); else CSV."""
    if fmt is not None:
        return fmt
    accept = request.headers.get("accept", "")
    if "application/x-npy" in accept or "application/octet-stream" in accept:
        return "npy"
    return "csv"


def labels_response(
    request: Request, fmt: LabelsFormat | None, source: labels_service.LabelSource, name: str
) -> StreamingResponse:
    """The labels of `source`, streamed in the format asked for, as `labels-{name}.csv|npy`."""
    chosen = _labels_format(request, fmt)
    media = "text/csv" if chosen == "csv" else "application/x-npy"
    return StreamingResponse(
        labels_service.stream(source, chosen),
        media_type=media,
        headers={
            "Content-Disposition": f'attachment; filename="labels-{name}.{chosen}"',
            "Vary": "Accept",
        },
    )


@router.get(
    "/jobs/{job_id}/labels",
    response_class=StreamingResponse,
    responses=LABELS_RESPONSES,
    summary="The owner's labels: each row's nearest released centre (CSV or .npy)",
)
def jobs_labels(
    job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    fmt: LabelsQuery = None,
) -> StreamingResponse:
    """For the dataset's owner only (anyone else: 404). Computed from the released centres
    (post-processing: no budget) and streamed in blocks. A job that has not succeeded: 409;
    a dataset whose rows were deleted: 410; a federated dataset's job: 409 (each member's
    owner downloads its own rows' labels from its member's server)."""
    if key.role != Role.OWNER:
        raise NotFound("no such job", code="job-not-found")
    job, _ = jobs_service.get_job(session, job_id, key.tenant)
    source = labels_service.open_labels(session, job)
    return labels_response(request, fmt, source, str(job.id))
