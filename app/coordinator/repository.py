"""The coordinator's queries: the keys it calls a federated dataset's members with."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import FederationMemberKey


def member_keys(session: Session, dataset_id: uuid.UUID) -> dict[int, str]:
    rows = session.scalars(
        select(FederationMemberKey).where(FederationMemberKey.dataset_id == dataset_id)
    ).all()
    return {row.position: row.secret for row in rows}


def add_member_key(session: Session, dataset_id: uuid.UUID, position: int, secret: str) -> None:
    session.add(FederationMemberKey(dataset_id=dataset_id, position=position, secret=secret))
