"""The federation, seen from a member: the seat a coordinator checks before using it."""

from __future__ import annotations

from fastapi import APIRouter

from app.federation import service as federation_service
from app.federation.schemas import SeatOut
from app.keys.auth import MemberApiKey
from app.kit.deps import SessionDep, UnitOfWorkRoute
from app.kit.problems import responses

router = APIRouter(prefix="/v1/federation", tags=["federation"], route_class=UnitOfWorkRoute)


@router.get("/seat", response_model=SeatOut, responses=responses(401, 403, 409, validation=False))
def federation_seat(session: SessionDep, key: MemberApiKey) -> SeatOut:
    """The calling member key's seat (member keys only): its dataset's public metadata and the
    X25519 public key the member masks with, with its fingerprint."""
    return SeatOut.of(federation_service.seat(session, key))
