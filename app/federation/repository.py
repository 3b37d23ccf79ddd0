"""Federation queries: a member key's seat."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.models import MemberSeat


def seat_of(session: Session, key_id: uuid.UUID) -> MemberSeat | None:
    return session.get(MemberSeat, key_id)
