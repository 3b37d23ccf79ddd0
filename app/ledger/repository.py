"""The ledger's queries, the dataset's budget lock, and the running budgets' rows (the
dataset's, and each capped key's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from app.models import ApiKey, Dataset, DatasetBudget, Job, KeyBudget, LedgerEntry, MemberJob


def _is_sqlite(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def lock_dataset(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    """Take the dataset's budget lock for this transaction.

    Postgres: SELECT ... FOR UPDATE. SQLite has no row locks: callers open the transaction with
    BEGIN IMMEDIATE (app.kit.db.session.IMMEDIATE), which holds the database write lock instead.
    """
    stmt = select(Dataset).where(Dataset.id == dataset_id).execution_options(populate_existing=True)
    if not _is_sqlite(session):
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def budget_row(
    session: Session, dataset_id: uuid.UUID, *, for_update: bool = False
) -> DatasetBudget | None:
    """The dataset's running budget as the database has it now.

    `for_update`: lock the row until commit (Postgres; on SQLite every writer already holds the
    database's write lock), because the caller is about to move it. Every writer takes this
    lock last, after any other lock it needs, so two writers never wait for each other in a
    circle.
    """
    stmt = (
        select(DatasetBudget)
        .where(DatasetBudget.dataset_id == dataset_id)
        .execution_options(populate_existing=True)
    )
    if for_update and not _is_sqlite(session):
        # The entry the caller appends next references the dataset, and inserting it takes
        # the dataset row's KEY SHARE lock: taken first, as admission takes the dataset's lock
        # before this row, so that no two writers take the two in opposite orders.
        session.execute(
            select(Dataset.id).where(Dataset.id == dataset_id).with_for_update(key_share=True)
        )
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def budget_rows(
    session: Session, dataset_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, DatasetBudget]:
    """The running budgets of several datasets, in one query (a page of a list)."""
    if not dataset_ids:
        return {}
    rows = session.scalars(
        select(DatasetBudget).where(DatasetBudget.dataset_id.in_(list(dataset_ids)))
    )
    return {row.dataset_id: row for row in rows}


def ledger_entries(session: Session, dataset_id: uuid.UUID) -> Sequence[LedgerEntry]:
    """Every entry of the dataset, oldest first (the whole ledger: for audits and tests, never
    for answering a request)."""
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    ).all()


@dataclass(frozen=True)
class EntryFilter:
    """Which of a dataset's entries a page holds: those of one actor key, and those written
    in [since, until) (None: no bound)."""

    key_id: uuid.UUID | None = None
    since: datetime | None = None
    until: datetime | None = None


def ledger_page(
    session: Session,
    dataset_id: uuid.UUID,
    after_id: int | None,
    limit: int,
    newest_first: bool,
    only: EntryFilter = EntryFilter(),
) -> Sequence[LedgerEntry]:
    """Up to `limit` entries of the dataset past `after_id` (above it, oldest first; below it,
    newest first), of those `only` selects. The index on dataset_id keeps each page's cost to
    its own entries."""
    stmt = select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)
    if only.key_id is not None:
        stmt = stmt.where(LedgerEntry.actor_key_id == only.key_id)
    if only.since is not None:
        stmt = stmt.where(LedgerEntry.created_at >= only.since)
    if only.until is not None:
        stmt = stmt.where(LedgerEntry.created_at < only.until)
    if after_id is not None:
        stmt = stmt.where(LedgerEntry.id < after_id if newest_first else LedgerEntry.id > after_id)
    order = LedgerEntry.id.desc() if newest_first else LedgerEntry.id
    return session.scalars(stmt.order_by(order).limit(limit)).all()


def streamed_entries(session: Session, dataset_id: uuid.UUID) -> Iterator[LedgerEntry]:
    """Every entry of the dataset, oldest first, streamed a few thousand at a time: what an
    audit reads (the whole ledger: never for answering a request)."""
    stmt = (
        select(LedgerEntry)
        .where(LedgerEntry.dataset_id == dataset_id)
        .order_by(LedgerEntry.id)
        .execution_options(yield_per=5000)
    )
    return iter(session.scalars(stmt))


EntryFactsRow = Row[tuple[str, uuid.UUID | None, float | None, uuid.UUID | None]]


def entry_facts(session: Session, dataset_id: uuid.UUID) -> Iterator[EntryFactsRow]:
    """(kind, job_id, mu, actor_key_id) of every entry of the dataset, oldest first, streamed:
    what a replay reads, without building an object per entry."""
    stmt = (
        select(LedgerEntry.kind, LedgerEntry.job_id, LedgerEntry.mu, LedgerEntry.actor_key_id)
        .where(LedgerEntry.dataset_id == dataset_id)
        .order_by(LedgerEntry.id)
        .execution_options(yield_per=5000)
    )
    return iter(session.execute(stmt))


def jobs_of_dataset(session: Session, dataset_id: uuid.UUID) -> dict[uuid.UUID, Job]:
    """The dataset's job rows by id (what an audit compares the commits with)."""
    return {job.id: job for job in session.scalars(select(Job).where(Job.dataset_id == dataset_id))}


def entry_count(session: Session, dataset_id: uuid.UUID) -> int:
    return int(
        session.scalar(select(func.count()).where(LedgerEntry.dataset_id == dataset_id)) or 0
    )


def all_ledger_entries_for_job(session: Session, job_id: uuid.UUID) -> Sequence[LedgerEntry]:
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
    ).all()


def dataset_ids(session: Session, after: uuid.UUID | None, limit: int) -> Sequence[uuid.UUID]:
    """Up to `limit` dataset ids in id order, starting after `after` (a rotating check)."""
    stmt = select(Dataset.id)
    if after is not None:
        stmt = stmt.where(Dataset.id > after)
    return session.scalars(stmt.order_by(Dataset.id).limit(limit)).all()


def dataset_by_id(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    return session.get(Dataset, dataset_id)


def dataset_for_tenant(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant == tenant))


def key_budget_row(
    session: Session, dataset_id: uuid.UUID, key_id: uuid.UUID, *, for_update: bool = False
) -> KeyBudget | None:
    """The key's running budget on the dataset (None: the key has no cap there). `for_update`
    locks it until commit (Postgres); writers take it before the dataset's running budget."""
    stmt = (
        select(KeyBudget)
        .where(KeyBudget.dataset_id == dataset_id, KeyBudget.key_id == key_id)
        .execution_options(populate_existing=True)
    )
    if for_update and not _is_sqlite(session):
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def key_budget_rows(session: Session, dataset_id: uuid.UUID) -> Sequence[KeyBudget]:
    """Every capped key's running budget on the dataset, by key id."""
    stmt = select(KeyBudget).where(KeyBudget.dataset_id == dataset_id).order_by(KeyBudget.key_id)
    return session.scalars(stmt).all()


def capped_keys(session: Session) -> Sequence[KeyBudget]:
    """Every key cap of every dataset (for the metrics)."""
    return session.scalars(select(KeyBudget)).all()


def tenant_key(session: Session, key_id: uuid.UUID, tenant: str) -> ApiKey | None:
    """The tenant's API key `key_id`, revoked or not."""
    return session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant == tenant))


def delete_key_budget(session: Session, row: KeyBudget) -> None:
    session.delete(row)


def member_job_mus(session: Session, dataset_id: uuid.UUID) -> dict[uuid.UUID, float]:
    """The mu of every federated job a member key joined on the dataset, by member job id."""
    rows = session.execute(
        select(MemberJob.id, MemberJob.mu).where(MemberJob.dataset_id == dataset_id)
    ).all()
    return {row.id: float(row.mu) for row in rows}
