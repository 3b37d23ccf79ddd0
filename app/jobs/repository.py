"""Jobs' queries, and the compare-and-set that moves a job from one status to the next."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.orm import Session

from app.jobs.results import ResultContext
from app.kit.query import ListQuery
from app.kit.repository import list_page
from app.models import Dataset, Job, JobStatus


def job_for_tenant(session: Session, job_id: uuid.UUID, tenant: str) -> Job | None:
    return session.scalar(select(Job).where(Job.id == job_id, Job.tenant == tenant))


def job_and_context_for_tenant(
    session: Session, job_id: uuid.UUID, tenant: str
) -> tuple[Job, ResultContext] | None:
    """A job with its dataset's public facts that its result is read with (column names,
    domain, relation), in one query (what a poll needs)."""
    row = session.execute(
        select(
            Job,
            Dataset.columns,
            Dataset.domain_kind,
            Dataset.lower,
            Dataset.upper,
            Dataset.center,
            Dataset.radius,
            Dataset.count_public,
            Dataset.n_rows,
            Dataset.n_rows_dp,
            Dataset.table_spec,
        )
        .join(Dataset, Dataset.id == Job.dataset_id)
        .where(Job.id == job_id, Job.tenant == tenant)
    ).first()
    return None if row is None else (row[0], ResultContext.of_columns(*row[1:]))


def job_by_idempotency_key(session: Session, tenant: str, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.tenant == tenant, Job.idempotency_key == key))


def list_jobs(session: Session, query: ListQuery) -> tuple[list[Job], str | None]:
    return list_page(session, Job, query)


def transition_job(
    session: Session, job_id: uuid.UUID, *, from_status: str | tuple[str, ...], **values: Any
) -> bool:
    """Conditional state change: True only if the job was in `from_status` and now is updated.

    This compare-and-set is what guarantees a job runs (and draws noise) at most once.
    """
    statuses = (from_status,) if isinstance(from_status, str) else from_status
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(statuses))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def update_running_job(session: Session, job_id: uuid.UUID, **values: Any) -> bool:
    return transition_job(session, job_id, from_status=JobStatus.RUNNING, **values)


def set_member_states(session: Session, job_id: uuid.UUID, states: list[Any]) -> None:
    """Record a federated job's members' states (public facts), whatever the job's status."""
    session.execute(update(Job).where(Job.id == job_id).values(member_states=states))


def stale_running_jobs(session: Session, cutoff: datetime) -> Sequence[Job]:
    return session.scalars(
        select(Job).where(
            Job.status == JobStatus.RUNNING,
            or_(Job.heartbeat_at < cutoff, Job.heartbeat_at.is_(None)),
        )
    ).all()


def queued_jobs_created_before(
    session: Session, cutoff: datetime, limit: int = 500
) -> Sequence[Job]:
    """Jobs still queued that were admitted before `cutoff`, oldest first."""
    return session.scalars(
        select(Job)
        .where(Job.status == JobStatus.QUEUED, Job.created_at < cutoff)
        .order_by(Job.created_at)
        .limit(limit)
    ).all()


def job_status(session: Session, job_id: uuid.UUID) -> str | None:
    """The job's status as the database has it now (not as this session last loaded it)."""
    return session.scalar(select(Job.status).where(Job.id == job_id))


def lock_tenant_queue(session: Session, tenant: str) -> None:
    """Serialise the tenant's admissions until commit, for counting its queued jobs: a
    transaction-scoped advisory lock on PostgreSQL; on SQLite every admission already holds the
    database's write lock (BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "sqlite":
        return
    digest = hashlib.sha256(f"privclust queued jobs of {tenant}".encode()).digest()
    session.execute(
        text("SELECT pg_advisory_xact_lock(:k)"),
        {"k": int.from_bytes(digest[:8], "big", signed=True)},
    )


def count_queued(session: Session, tenant: str, created_by: uuid.UUID | None, limit: int) -> int:
    """How many of the tenant's jobs (those of key `created_by` when given) are queued, counted
    up to `limit` + 1 at most (the indexes on (tenant, status, ...) and (created_by, status)
    keep it to those rows)."""
    stmt = select(Job.id).where(Job.status == JobStatus.QUEUED)
    stmt = (
        stmt.where(Job.tenant == tenant)
        if created_by is None
        else stmt.where(Job.created_by == created_by)
    )
    return int(
        session.scalar(select(func.count()).select_from(stmt.limit(limit + 1).subquery())) or 0
    )
