"""API keys' queries."""

from __future__ import annotations

import uuid

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from app.kit.repository import paginate
from app.models import ApiKey, Dataset


def api_key_by_hash(session: Session, digest: str) -> ApiKey | None:
    return session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))


def dataset_of_tenant(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset | None:
    """The dataset a member key would serve, if the tenant owns it."""
    dataset = session.get(Dataset, dataset_id)
    return dataset if dataset is not None and dataset.tenant == tenant else None


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
