"""Datasets' queries."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.kit.repository import paginate
from app.models import Dataset


def dataset_for_tenant(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant == tenant))


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
