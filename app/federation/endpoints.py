"""The federation, seen from a member: the seat a coordinator checks before using it, and the
federated jobs it takes part in (join, answer releases, finish)."""

from __future__ import annotations

import base64
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.federation import labels as member_labels
from app.federation import member
from app.federation import service as federation_service
from app.federation.schemas import (
    FederatedJobOut,
    FinishIn,
    MemberJobOut,
    MemberJoin,
    ReleaseIn,
    ReleaseOut,
    SeatOut,
)
from app.jobs.endpoints import LABELS_RESPONSES, LabelsQuery, labels_response
from app.keys.auth import MemberApiKey, TenantKey
from app.kit.deps import SessionDep, UnitOfWorkRoute
from app.kit.problems import responses

router = APIRouter(prefix="/v1/federation", tags=["federation"], route_class=UnitOfWorkRoute)
# The member dataset's owner: the federated jobs on its dataset and its own rows' labels.
owner_router = APIRouter(prefix="/v1/datasets", tags=["federation"], route_class=UnitOfWorkRoute)


@router.get("/seat", response_model=SeatOut, responses=responses(401, 403, 409, validation=False))
def federation_seat(session: SessionDep, key: MemberApiKey) -> SeatOut:
    """The calling member key's seat (member keys only): its dataset's public metadata and the
    X25519 public key the member masks with, with its fingerprint."""
    return SeatOut.of(federation_service.seat(session, key))


@router.post(
    "/jobs",
    response_model=MemberJobOut,
    status_code=201,
    responses=responses(401, 403, 404, 409, 422),
)
def federation_join(session: SessionDep, key: MemberApiKey, body: MemberJoin) -> MemberJobOut:
    """Join a federated job (member keys only): the plan is checked against this member (its
    key among the members, its dataset's domain and columns) and its mu is reserved on the
    member's own ledger; 409 naming the limit when there is no room, nothing charged."""
    return MemberJobOut.of(member.join(session, key, body.request()))


@router.post(
    "/jobs/{member_job_id}/releases/{release}",
    response_model=ReleaseOut,
    responses=responses(401, 403, 404, 409, 422),
)
def federation_release(
    member_job_id: uuid.UUID,
    release: int,
    session: SessionDep,
    key: MemberApiKey,
    body: ReleaseIn,
) -> ReleaseOut:
    """Answer one release: the pass over this member's rows, its noise share, masked. Only the
    masked words are returned; the same request again gets the same words."""
    words = member.answer(session, key, member_job_id, release, body.body())
    return ReleaseOut(release=release, words=base64.b64encode(words).decode("ascii"))


@router.post(
    "/jobs/{member_job_id}/finish",
    response_model=MemberJobOut,
    responses=responses(401, 403, 404),
)
def federation_finish(
    member_job_id: uuid.UUID, session: SessionDep, key: MemberApiKey, body: FinishIn
) -> MemberJobOut:
    """The job ended: refunded on the member's ledger if it answered no release. A job that
    succeeded comes with its released centres (k rows of the dataset's d finite numbers, else
    422), stored for the owner's labels."""
    job = member.finish(session, key, member_job_id, body.succeeded, body.centers)
    return MemberJobOut.of(job)


@owner_router.get(
    "/{dataset_id}/federated-jobs",
    response_model=list[FederatedJobOut],
    responses=responses(401, 403, 404),
    summary="The federated jobs this member dataset took part in (its owner only)",
)
def federated_jobs_list(
    dataset_id: uuid.UUID, session: SessionDep, key: TenantKey
) -> list[FederatedJobOut]:
    """The jobs the dataset's member keys joined, newest first: public metadata only, and
    whether the job's released centres are stored (its labels can be downloaded). For the
    dataset's owner only (anyone else: 404)."""
    jobs = member_labels.member_jobs(session, key, dataset_id)
    return [FederatedJobOut.of(job) for job in jobs]


@owner_router.get(
    "/{dataset_id}/federated-jobs/{member_job_id}/labels",
    response_class=StreamingResponse,
    responses=LABELS_RESPONSES,
    summary="The owner's labels of its own rows for a federated job (CSV or .npy)",
)
def federated_job_labels(
    dataset_id: uuid.UUID,
    member_job_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    fmt: LabelsQuery = None,
) -> StreamingResponse:
    """Each of this member's rows' nearest centre among those the federated job released,
    computed here (post-processing: no budget) and streamed in blocks, as the central labels.
    For the dataset's owner only (anyone else: 404); a job that holds no centres (it has not
    succeeded): 409 `job-not-succeeded`; rows deleted: 410."""
    source = member_labels.member_job_labels(session, key, dataset_id, member_job_id)
    return labels_response(request, fmt, source, str(member_job_id))
