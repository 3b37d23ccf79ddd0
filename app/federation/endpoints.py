"""The federation, seen from a member: the seat a coordinator checks before using it, and the
federated jobs it takes part in (join, answer releases, finish)."""

from __future__ import annotations

import base64
import uuid

from fastapi import APIRouter

from app.federation import member
from app.federation import service as federation_service
from app.federation.schemas import (
    FinishIn,
    MemberJobOut,
    MemberJoin,
    ReleaseIn,
    ReleaseOut,
    SeatOut,
)
from app.keys.auth import MemberApiKey
from app.kit.deps import SessionDep, UnitOfWorkRoute
from app.kit.problems import responses

router = APIRouter(prefix="/v1/federation", tags=["federation"], route_class=UnitOfWorkRoute)


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
    """The job ended: refunded on the member's ledger if it answered no release."""
    return MemberJobOut.of(member.finish(session, key, member_job_id, body.succeeded))
