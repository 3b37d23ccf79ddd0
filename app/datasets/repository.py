"""Datasets' queries, and the compare-and-set moves of an import's state."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from app.kit.repository import paginate
from app.models import Dataset, DatasetStatus


def list_datasets(
    session: Session, tenant: str, limit: int, cursor: str | None
) -> tuple[list[Dataset], str | None]:
    return paginate(
        session, select(Dataset).where(Dataset.tenant == tenant), Dataset, limit, cursor
    )


def dataset_storage_paths(session: Session) -> list[str]:
    """Every dataset's storage path, deleted datasets' included."""
    paths = session.scalars(select(Dataset.storage_path)).all()
    return [p for p in paths if p is not None]


# An import's state moves by compare-and-set: each change applies only to a dataset still
# importing (and not deleted), so a retried, duplicated or swept import cannot move it twice.
def _importing(dataset_id: uuid.UUID) -> ColumnElement[bool]:
    return and_(
        Dataset.id == dataset_id,
        Dataset.status == DatasetStatus.IMPORTING,
        Dataset.deleted_at.is_(None),
    )


def claim_import(
    session: Session, dataset_id: uuid.UUID, now: datetime, stale_before: datetime, planned: str
) -> bool:
    """Take an import that no worker runs (never started, or silent since `stale_before`) and
    has not been charged yet, recording where its rows will be written."""
    claimed = session.execute(
        update(Dataset)
        .where(
            _importing(dataset_id),
            Dataset.n_rows.is_(None),
            or_(Dataset.heartbeat_at.is_(None), Dataset.heartbeat_at < stale_before),
        )
        .values(heartbeat_at=now, progress=0.0, storage_path=planned)
    )
    return _changed(claimed)


def record_progress(
    session: Session, dataset_id: uuid.UUID, progress: float, now: datetime
) -> bool:
    """The import's progress and heartbeat; False when it is no longer importing (stop)."""
    moved = session.execute(
        update(Dataset)
        .where(_importing(dataset_id))
        .values(progress=min(max(progress, 0.0), 1.0), heartbeat_at=now)
    )
    return _changed(moved)


def release_import(session: Session, dataset_id: uuid.UUID, n_rows_dp: int, now: datetime) -> bool:
    """Record an import's released row count, once: it is ready."""
    moved = session.execute(
        update(Dataset)
        .where(_importing(dataset_id), Dataset.n_rows_dp.is_(None))
        .values(n_rows_dp=n_rows_dp, status=DatasetStatus.READY, progress=1.0, heartbeat_at=now)
    )
    return _changed(moved)


@dataclass(frozen=True)
class FailedImport:
    """Where a failed import's rows were written (to delete once the failure is committed),
    and whether its row count had been charged."""

    storage_path: str | None
    charged: bool


def fail_import(session: Session, dataset_id: uuid.UUID, reason: str) -> FailedImport | None:
    """Mark an import failed with `reason` and forget where its rows were written; None if it
    was not importing."""
    dataset = session.scalar(
        select(Dataset).where(_importing(dataset_id)).execution_options(populate_existing=True)
    )
    if dataset is None:
        return None
    before = FailedImport(dataset.storage_path, charged=dataset.n_rows is not None)
    failed = session.execute(
        update(Dataset)
        .where(_importing(dataset_id))
        .values(status=DatasetStatus.FAILED, failure_reason=reason, storage_path=None)
    )
    return before if _changed(failed) else None


def stale_imports(session: Session, heartbeat_before: datetime) -> list[uuid.UUID]:
    """Imports whose worker has been silent since `heartbeat_before` (it died)."""
    return list(
        session.scalars(
            select(Dataset.id).where(
                Dataset.status == DatasetStatus.IMPORTING,
                Dataset.heartbeat_at < heartbeat_before,
            )
        )
    )


def waiting_imports(session: Session, created_before: datetime) -> list[uuid.UUID]:
    """Imports that no worker has started since `created_before`."""
    return list(
        session.scalars(
            select(Dataset.id).where(
                Dataset.status == DatasetStatus.IMPORTING,
                Dataset.heartbeat_at.is_(None),
                Dataset.created_at < created_before,
            )
        )
    )


def _changed(result: Any) -> bool:
    return bool(result.rowcount == 1)
