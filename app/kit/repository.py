"""Query plumbing shared by every domain's repository: adding a row, keyset pagination."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import Session

from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter

T = TypeVar("T")


class KeysetRow(Protocol):
    """A table listed by keyset pagination: rows ordered by (created_at, id)."""

    created_at: datetime
    id: uuid.UUID


M = TypeVar("M", bound=KeysetRow)


def add(session: Session, obj: T) -> T:
    session.add(obj)
    session.flush()
    return obj


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
    table: Any = model  # the mapped class: its attributes are SQL columns here
    if cursor:
        ts, id_ = _decode_cursor(cursor)
        stmt = stmt.where(or_(table.created_at < ts, and_(table.created_at == ts, table.id < id_)))
    stmt = stmt.order_by(table.created_at.desc(), table.id.desc()).limit(limit + 1)
    rows: list[M] = list(session.scalars(stmt))
    nxt = (
        encode_cursor(rows[limit - 1].created_at, rows[limit - 1].id) if len(rows) > limit else None
    )
    return rows[:limit], nxt


def now() -> datetime:
    return utcnow()
