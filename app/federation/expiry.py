"""A member's own end to the federated jobs whose coordinator went silent.

A member reserves a job's mu when it joins; the coordinator tells it the job's end (`finish`).
A coordinator that cannot (its worker and its sweeper both gone, the network down) would leave
the reservation held for ever, so every member's sweeper ends on its own each running job that
received no release for PRIVCLUST_FEDERATION_RESERVATION_SECONDS (counted from the join, or
from the last release it answered): refunded when it answered no release (no noise share of it
was ever drawn), else failed with its charge kept (app.federation.member, `end`). The job then
answers no further release (409 `member-job-finished`).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.federation import member
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.kit.db.session import unit_of_work
from app.ledger import service as ledger
from app.models import JobStatus, MemberAnswer, MemberJob

log = logging.getLogger("privclust.api")


def expire_idle_member_jobs(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """The API sweeper's chore (app.jobs.sweeper): `expire_member_jobs` with the configured
    idle time, each ended job logged."""
    idle = timedelta(seconds=settings.federation_reservation_seconds)
    with unit_of_work(sessions) as session:
        for job_id in expire_member_jobs(session, idle):
            log.warning("federated member job %s ended: no release came for %s", job_id, idle)


def expire_member_jobs(
    session: Session, idle: timedelta, now: datetime | None = None
) -> list[uuid.UUID]:
    """End every running member job idle for longer than `idle` (see the module docstring);
    each in a budget transaction of its own. Returns the ids of the jobs it ended."""
    cutoff = (now or utcnow()) - idle
    stale = session.scalars(
        select(MemberJob.id).where(
            MemberJob.status == JobStatus.RUNNING, MemberJob.created_at < cutoff
        )
    ).all()
    note = (
        f"no release came for {idle.total_seconds():g} s: the reservation expired before this "
        "member answered a release"
    )
    ended = []
    for job_id in stale:
        ledger.begin_budget_transaction(session)
        job = session.get(MemberJob, job_id, with_for_update=True, populate_existing=True)
        last = session.scalar(
            select(func.max(MemberAnswer.created_at)).where(MemberAnswer.member_job_id == job_id)
        )
        if job is not None and job.status == JobStatus.RUNNING and (last is None or last < cutoff):
            member.end(session, job, False, note)
            ended.append(job_id)
        session.commit()
    return ended
