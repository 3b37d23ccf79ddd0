"""All SQL lives here: small query functions over the models, used by the services."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, and_, case, exists, func, or_, select, update
from sqlalchemy.orm import Session

from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter
from app.models import ApiKey, Dataset, Job, LedgerEntry, Sweep

T = TypeVar("T")
M = TypeVar("M", ApiKey, Dataset, Job, Sweep)


def add(session: Session, obj: T) -> T:
    session.add(obj)
    session.flush()
    return obj


# --- keyset pagination -------------------------------------------------------------------------


def encode_cursor(created_at: datetime, id_: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(id_)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, id_ = json.loads(raw)
        return datetime.fromisoformat(ts), uuid.UUID(id_)
    except (ValueError, TypeError) as exc:
        raise InvalidParameter("cursor is not one this API returned", field="cursor") from exc


def paginate(
    session: Session, stmt: Select[Any], model: type[M], limit: int, cursor: str | None
) -> tuple[list[M], str | None]:
    """Newest first; the cursor is the (created_at, id) of the last item of the previous page."""
    if cursor:
        ts, id_ = _decode_cursor(cursor)
        stmt = stmt.where(or_(model.created_at < ts, and_(model.created_at == ts, model.id < id_)))
    stmt = stmt.order_by(model.created_at.desc(), model.id.desc()).limit(limit + 1)
    rows: list[M] = list(session.scalars(stmt))
    nxt = (
        encode_cursor(rows[limit - 1].created_at, rows[limit - 1].id) if len(rows) > limit else None
    )
    return rows[:limit], nxt


# --- API keys ----------------------------------------------------------------------------------


def api_key_by_hash(session: Session, digest: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))


def active_admin_exists(session: Session) -> bool:
    return bool(
        session.scalar(select(exists().where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))))
    )


def list_api_keys(
    session: Session, limit: int, cursor: str | None, tenant: str | None = None
) -> tuple[list[ApiKey], str | None]:
    stmt = select(ApiKey)
    if tenant is not None:
        stmt = stmt.where(ApiKey.tenant == tenant)
    return paginate(session, stmt, ApiKey, limit, cursor)


# --- datasets ----------------------------------------------------------------------------------


def dataset_for_tenant(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant == tenant))


def lock_dataset(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    """Take the dataset's budget lock for this transaction.

    Postgres: SELECT ... FOR UPDATE. SQLite has no row locks: callers open the transaction with
    BEGIN IMMEDIATE (app.kit.db.session.IMMEDIATE), which holds the database write lock instead.
    """
    stmt = select(Dataset).where(Dataset.id == dataset_id).execution_options(populate_existing=True)
    if session.get_bind().dialect.name != "sqlite":
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def list_datasets(
    session: Session, tenant: str, limit: int, cursor: str | None
) -> tuple[list[Dataset], str | None]:
    return paginate(
        session, select(Dataset).where(Dataset.tenant == tenant), Dataset, limit, cursor
    )


# --- ledger ------------------------------------------------------------------------------------


def dataset_storage_paths(session: Session) -> list[str]:
    """Every dataset's storage path, deleted datasets' included."""
    paths = session.scalars(select(Dataset.storage_path)).all()
    return [p for p in paths if p is not None]


def ledger_entries(session: Session, dataset_id: uuid.UUID) -> Sequence[LedgerEntry]:
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    ).all()


def all_ledger_entries_for_job(session: Session, job_id: uuid.UUID) -> Sequence[LedgerEntry]:
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
    ).all()


# --- jobs --------------------------------------------------------------------------------------


def job_for_tenant(session: Session, job_id: uuid.UUID, tenant: str) -> Job | None:
    return session.scalar(select(Job).where(Job.id == job_id, Job.tenant == tenant))


def job_and_columns_for_tenant(
    session: Session, job_id: uuid.UUID, tenant: str
) -> tuple[Job, list[str]] | None:
    """A job with its dataset's column names, in one query (what a poll needs)."""
    row = session.execute(
        select(Job, Dataset.columns)
        .join(Dataset, Dataset.id == Job.dataset_id)
        .where(Job.id == job_id, Job.tenant == tenant)
    ).first()
    return None if row is None else (row[0], list(row[1]))


def job_by_idempotency_key(session: Session, tenant: str, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.tenant == tenant, Job.idempotency_key == key))


def list_jobs(
    session: Session,
    tenant: str,
    limit: int,
    cursor: str | None,
    dataset_id: uuid.UUID | None = None,
    status: str | None = None,
) -> tuple[list[Job], str | None]:
    stmt = select(Job).where(Job.tenant == tenant)
    if dataset_id is not None:
        stmt = stmt.where(Job.dataset_id == dataset_id)
    if status is not None:
        stmt = stmt.where(Job.status == status)
    return paginate(session, stmt, Job, limit, cursor)


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
    return transition_job(session, job_id, from_status="running", **values)


def stale_running_jobs(session: Session, cutoff: datetime) -> Sequence[Job]:
    return session.scalars(
        select(Job).where(
            Job.status == "running", or_(Job.heartbeat_at < cutoff, Job.heartbeat_at.is_(None))
        )
    ).all()


def queued_jobs_created_before(
    session: Session, cutoff: datetime, limit: int = 500
) -> Sequence[Job]:
    """Jobs still queued that were admitted before `cutoff`, oldest first."""
    return session.scalars(
        select(Job)
        .where(Job.status == "queued", Job.created_at < cutoff)
        .order_by(Job.created_at)
        .limit(limit)
    ).all()


def job_status(session: Session, job_id: uuid.UUID) -> str | None:
    """The job's status as the database has it now (not as this session last loaded it)."""
    return session.scalar(select(Job.status).where(Job.id == job_id))


# --- sweeps ------------------------------------------------------------------------------------


def sweep_for_tenant(session: Session, sweep_id: uuid.UUID, tenant: str) -> Sweep | None:
    return session.scalar(select(Sweep).where(Sweep.id == sweep_id, Sweep.tenant == tenant))


def sweep_by_idempotency_key(session: Session, tenant: str, key: str) -> Sweep | None:
    return session.scalar(select(Sweep).where(Sweep.tenant == tenant, Sweep.idempotency_key == key))


def jobs_of_sweep(session: Session, sweep_id: uuid.UUID) -> list[Job]:
    """A sweep's jobs in increasing k."""
    return list(session.scalars(select(Job).where(Job.sweep_id == sweep_id).order_by(Job.k)))


def list_sweeps(
    session: Session,
    tenant: str,
    limit: int,
    cursor: str | None,
    dataset_id: uuid.UUID | None = None,
) -> tuple[list[tuple[Sweep, list[Job]]], str | None]:
    """A page of the tenant's sweeps (newest first), each with its jobs in increasing k, and
    the next cursor: two queries whatever the page size."""
    stmt = select(Sweep).where(Sweep.tenant == tenant)
    if dataset_id is not None:
        stmt = stmt.where(Sweep.dataset_id == dataset_id)
    sweeps, nxt = paginate(session, stmt, Sweep, limit, cursor)
    jobs: dict[uuid.UUID, list[Job]] = {s.id: [] for s in sweeps}
    if sweeps:
        for job in session.scalars(select(Job).where(Job.sweep_id.in_(list(jobs))).order_by(Job.k)):
            assert job.sweep_id is not None
            jobs[job.sweep_id].append(job)
    return [(s, jobs[s.id]) for s in sweeps], nxt


def now() -> datetime:
    return utcnow()


# Aggregates read by the /metrics scrape (app.ops.metrics): counts only, never a row's content.


def job_counts(session: Session) -> Sequence[tuple[str, str, int]]:
    """(status, algorithm, number of jobs) for every pair that has jobs."""
    rows = session.execute(
        select(Job.status, Job.algorithm, func.count()).group_by(Job.status, Job.algorithm)
    ).all()
    return [(status, algorithm, int(n)) for status, algorithm, n in rows]


def count_failed_jobs_with_error(session: Session, error: str) -> int:
    return int(
        session.scalar(
            select(func.count()).select_from(Job).where(Job.status == "failed", Job.error == error)
        )
        or 0
    )


def _seconds_between(session: Session, start: Any, end: Any) -> Any:
    if session.get_bind().dialect.name == "sqlite":  # timestamps are stored as UTC text
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


def job_run_durations(
    session: Session, bounds: Sequence[float]
) -> Sequence[tuple[str, int, float, list[int]]]:
    """Per algorithm, over jobs that started and finished: (algorithm, number of jobs, total
    seconds, [how many took at most b seconds, for each b in bounds]). One aggregate query."""
    seconds = _seconds_between(session, Job.started_at, Job.finished_at)
    rows = session.execute(
        select(
            Job.algorithm,
            func.count(),
            func.coalesce(func.sum(seconds), 0.0),
            *[func.sum(case((seconds <= b, 1), else_=0)) for b in bounds],
        )
        .where(Job.started_at.is_not(None), Job.finished_at.is_not(None))
        .group_by(Job.algorithm)
    ).all()
    return [(row[0], int(row[1]), float(row[2]), [int(n or 0) for n in row[3:]]) for row in rows]


def dataset_counts(session: Session) -> tuple[int, int]:
    """(datasets whose rows are stored, datasets deleted)."""
    rows = session.execute(
        select(Dataset.deleted_at.is_(None), func.count()).group_by(Dataset.deleted_at.is_(None))
    ).all()
    counts = {bool(active): int(n) for active, n in rows}
    return counts.get(True, 0), counts.get(False, 0)
