"""A dataset's budget and its ledger: read the budget, change the cap, read the entries."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.keys.auth import TenantKey, require
from app.kit.deps import SessionDep, UnitOfWorkRoute
from app.kit.problems import responses
from app.ledger import service as ledger
from app.ledger.schemas import Budget, BudgetPatch, LedgerEntryOut, LedgerOut
from app.models import Role

router = APIRouter(prefix="/v1/datasets", tags=["budget"], route_class=UnitOfWorkRoute)


@router.get(
    "/{dataset_id}/budget",
    response_model=Budget,
    responses=responses(401, 403, 404),
)
def budget_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> Budget:
    """The dataset's privacy budget: cap, spent, reserved and remaining (as mu and epsilon)."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    return Budget.of(ledger.budget(session, dataset))


@router.patch(
    "/{dataset_id}/budget",
    response_model=Budget,
    responses=responses(401, 403, 404, 422),
)
def budget_update(
    dataset_id: uuid.UUID, body: BudgetPatch, session: SessionDep, key: TenantKey
) -> Budget:
    """Change the cap (audited in the ledger); it can never go below what is spent, including
    the noisy row count released at upload."""
    require(key, Role.OWNER)
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    return Budget.of(ledger.update_cap(session, dataset, body.epsilon, body.delta, key.id))


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


@router.get(
    "/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(401, 403, 404),
)
def ledger_get(
    dataset_id: uuid.UUID,
    session: SessionDep,
    key: TenantKey,
    limit: LedgerLimit = ledger.LEDGER_PAGE_DEFAULT,
    cursor: LedgerCursor = None,
    order: LedgerOrder = "asc",
) -> LedgerOut:
    """The append-only ledger entries behind the budget, a page at a time (oldest first, or
    newest first with `order=desc`); the budget is the dataset's current one."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    entries, nxt, budget = ledger.ledger_page(
        session, dataset, limit, cursor, newest_first=order == "desc"
    )
    return LedgerOut(
        dataset_id=dataset.id,
        entries=[LedgerEntryOut.of(e, key.role) for e in entries],
        budget=Budget.of(budget),
        next_cursor=nxt,
    )
