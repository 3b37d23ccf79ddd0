"""The ledger's queries and the dataset's budget lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Dataset, LedgerEntry


def lock_dataset(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    """Take the dataset's budget lock for this transaction.

    Postgres: SELECT ... FOR UPDATE. SQLite has no row locks: callers open the transaction with
    BEGIN IMMEDIATE (app.kit.db.session.IMMEDIATE), which holds the database write lock instead.
    """
    stmt = select(Dataset).where(Dataset.id == dataset_id).execution_options(populate_existing=True)
    if session.get_bind().dialect.name != "sqlite":
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def ledger_entries(session: Session, dataset_id: uuid.UUID) -> Sequence[LedgerEntry]:
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    ).all()


def all_ledger_entries_for_job(session: Session, job_id: uuid.UUID) -> Sequence[LedgerEntry]:
    return session.scalars(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
    ).all()
