"""Federation queries: a member key's seat, and the federated jobs it joined."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import MemberJob, MemberSeat


def seat_of(session: Session, key_id: uuid.UUID) -> MemberSeat | None:
    return session.get(MemberSeat, key_id)


def member_job_by_names(
    session: Session, key_id: uuid.UUID, federation: str, job: str
) -> MemberJob | None:
    return session.scalars(
        select(MemberJob).where(
            MemberJob.key_id == key_id, MemberJob.federation == federation, MemberJob.job == job
        )
    ).one_or_none()
