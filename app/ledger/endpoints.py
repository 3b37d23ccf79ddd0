"""A dataset's budget and its ledger: read the budget, change the cap, read the entries."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session

from app.keys.auth import TenantKey, require
from app.kit.deps import ClockDep, SessionDep, UnitOfWorkRoute
from app.kit.errors import InvalidParameter
from app.kit.problems import responses
from app.kit.tables import TableFormat, table_response, table_responses
from app.ledger import key_caps
from app.ledger import service as ledger
from app.ledger.schemas import BudgetDetail, BudgetPatch, LedgerEntryOut, LedgerOut
from app.ledger.service import BudgetView, EntryFilter
from app.models import Dataset, Role

router = APIRouter(prefix="/v1/datasets", tags=["budget"], route_class=UnitOfWorkRoute)


@router.get(
    "/{dataset_id}/budget",
    response_model=BudgetDetail,
    responses=responses(401, 403, 404),
)
def budget_get(
    dataset_id: uuid.UUID, session: SessionDep, key: TenantKey, clock: ClockDep
) -> BudgetDetail:
    """The dataset's privacy budget: cap, spent, reserved and remaining (as mu and epsilon),
    its pace if any, and each capped key's cap and spend."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    return _budget_out(session, dataset, ledger.budget(session, dataset), clock.now())


def _budget_out(
    session: Session, dataset: Dataset, view: BudgetView, now: datetime
) -> BudgetDetail:
    """The budget with its pace and each capped key's spend."""
    pace = key_caps.dataset_pace(session, dataset, now)
    return BudgetDetail.detail(view, pace, key_caps.key_caps(session, dataset, now))


@router.patch(
    "/{dataset_id}/budget",
    response_model=BudgetDetail,
    responses=responses(401, 403, 404, 422),
)
def budget_update(
    dataset_id: uuid.UUID, body: BudgetPatch, session: SessionDep, key: TenantKey, clock: ClockDep
) -> BudgetDetail:
    """Change the cap (audited in the ledger; it can never go below what is spent, including
    the noisy row count released at upload) and/or the pace (`null` removes it). The cap is
    the lifetime guarantee; a pace only limits how fast it is spent."""
    require(key, Role.OWNER)
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    pace = body.pace.setting() if body.pace is not None else None
    change_pace = "pace" in body.model_fields_set
    if body.epsilon is None and not change_pace:
        raise InvalidParameter("give a new epsilon, a pace, or both", field="epsilon")
    now = clock.now()
    change = key_caps.BudgetChange(body.epsilon, body.delta, change_pace, pace)
    view = key_caps.update_budget(session, dataset, change, key.id, now)
    return _budget_out(session, dataset, view, now)


LedgerLimit = Annotated[
    int,
    Query(
        ge=1,
        le=ledger.LEDGER_PAGE_MAX,
        description="Entries per page; follow `next_cursor` for the rest.",
    ),
]
LedgerCursor = Annotated[
    str | None,
    Query(
        pattern=r"^[0-9]{1,18}$",
        description="The `next_cursor` of the previous page (with the same `order`): the "
        "ledger continues after it.",
    ),
]

LedgerOrder = Annotated[
    Literal["asc", "desc"],
    Query(description="`asc` (default): oldest first; `desc`: newest first."),
]


LedgerKey = Annotated[
    uuid.UUID | None, Query(description="Only the entries this API key caused (`actor`).")
]
# RFC 3339, as the API writes its times (an offset or Z; none: UTC). A string, not a datetime:
# pydantic would also take a number of seconds, which the schema does not say.
RFC3339 = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:"
    r"[0-5][0-9](\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?$"
)
LedgerSince = Annotated[
    str | None,
    Query(
        pattern=RFC3339,
        description="Only entries written at or after this time (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    ),
]
LedgerUntil = Annotated[
    str | None,
    Query(
        pattern=RFC3339,
        description="Only entries written before this time (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    ),
]


@router.get(
    "/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(401, 403, 404, 422),
)
def ledger_get(
    dataset_id: uuid.UUID,
    session: SessionDep,
    key: TenantKey,
    clock: ClockDep,
    limit: LedgerLimit = ledger.LEDGER_PAGE_DEFAULT,
    cursor: LedgerCursor = None,
    order: LedgerOrder = "asc",
    key_id: LedgerKey = None,
    since: LedgerSince = None,
    until: LedgerUntil = None,
) -> LedgerOut:
    """The append-only ledger entries behind the budget, a page at a time (oldest first, or
    newest first with `order=desc`), optionally only one key's and only those in a time window;
    the budget is the dataset's current one."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    only = ledger_filter(key_id, since, until)
    entries, nxt, budget = ledger.ledger_page(
        session, dataset, limit, cursor, newest_first=order == "desc", only=only
    )
    return LedgerOut(
        dataset_id=dataset.id,
        entries=[LedgerEntryOut.of(e, key.role) for e in entries],
        budget=_budget_out(session, dataset, budget, clock.now()),
        next_cursor=nxt,
    )


@router.get(
    "/{dataset_id}/ledger/table",
    response_model=list[LedgerEntryOut],
    responses=table_responses(
        "The entries as flat rows; `X-Next-Cursor` continues the table.", 401, 403, 404, 422
    ),
    summary="The ledger as a flat table (JSON rows or CSV), for dashboards",
)
def ledger_table(
    dataset_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    fmt: TableFormat = None,
    limit: LedgerLimit = ledger.LEDGER_PAGE_MAX,
    cursor: LedgerCursor = None,
    order: LedgerOrder = "asc",
    key_id: LedgerKey = None,
    since: LedgerSince = None,
    until: LedgerUntil = None,
) -> Response:
    """The entries of `GET .../ledger` (same filters), one row each; reading spends nothing.
    When more entries follow, the `X-Next-Cursor` header is the `cursor` of the next rows."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    only = ledger_filter(key_id, since, until)
    entries, nxt, _ = ledger.ledger_page(
        session, dataset, limit, cursor, newest_first=order == "desc", only=only
    )
    rows = [LedgerEntryOut.of(e, key.role).model_dump() for e in entries]
    headers = {} if nxt is None else {"X-Next-Cursor": nxt}
    return table_response(request, fmt, rows, list(LedgerEntryOut.model_fields), headers)


def ledger_filter(key_id: uuid.UUID | None, since: str | None, until: str | None) -> EntryFilter:
    """The entries a ledger page or table holds (times without an offset are read as UTC)."""
    return EntryFilter(key_id, _utc(since, "since"), _utc(until, "until"))


def _utc(text: str | None, field: str) -> datetime | None:
    """An RFC 3339 time in UTC; one whose UTC form is beyond the calendar's ends (year 1 at
    +14:00) becomes that end, which orders the same against every entry. A date that does not
    exist (February 30) is a 422 naming `field`."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.upper())
    except ValueError as exc:
        raise InvalidParameter(f"{field} is not a time: {exc}", field=field) from exc
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        end = datetime.min if when.year < 5000 else datetime.max
        return end.replace(tzinfo=UTC)
