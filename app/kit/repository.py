"""Query plumbing shared by every domain's repository: adding a row, keyset pagination."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session

from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter
from app.kit.query import ListQuery

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


# A cursor is a position in a list: `<microseconds since 1970 UTC>_<id as 32 hex digits>`.
# Every string of this form (app.kit.deps.PageCursor states it in the schema) is a position that
# decodes (16 digits reach the year 2286), so the schema allows exactly what the server takes.
CURSOR_PATTERN = r"^[0-9]{1,16}_[0-9a-f]{32}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def encode_cursor(created_at: datetime, id_: uuid.UUID) -> str:
    aware = created_at if created_at.utcoffset() is not None else created_at.replace(tzinfo=UTC)
    return f"{(aware - _EPOCH) // _MICROSECOND}_{id_.hex}"


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    if not re.fullmatch(CURSOR_PATTERN, cursor):
        raise InvalidParameter("cursor is not one this API returned", field="cursor")
    micros, hex_id = cursor.split("_")
    return _EPOCH + int(micros) * _MICROSECOND, uuid.UUID(hex=hex_id)


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


def list_page(session: Session, model: type[M], query: ListQuery) -> tuple[list[M], str | None]:
    """`query`'s page of `model`'s rows, newest first, and the next page's cursor."""
    table: Any = model
    stmt = select(model).where(table.tenant == query.tenant)
    if query.dataset_id is not None:
        stmt = stmt.where(table.dataset_id == query.dataset_id)
    if query.status is not None:
        stmt = stmt.where(table.status == query.status)
    return paginate(session, stmt, model, query.limit, query.cursor)


def now() -> datetime:
    return utcnow()
