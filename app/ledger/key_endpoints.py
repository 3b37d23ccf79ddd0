"""Caps per API key on a dataset's budget: set, read and lift one; read them all as a table."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from app.keys.auth import TenantKey, require
from app.kit.deps import ClockDep, SessionDep, UnitOfWorkRoute
from app.kit.problems import responses
from app.kit.tables import TableFormat, table_response, table_responses
from app.ledger import key_caps
from app.ledger import service as ledger
from app.ledger.schemas import KeyBudgetOut, KeyBudgetRow, KeyCapPut
from app.models import Role

router = APIRouter(prefix="/v1/datasets", tags=["budget"], route_class=UnitOfWorkRoute)


@router.put(
    "/{dataset_id}/budget/keys/{key_id}",
    response_model=KeyBudgetOut,
    responses=responses(401, 403, 404, 422),
    summary="Cap what one API key may spend of the dataset (and, optionally, its pace)",
)
def budget_key_put(
    dataset_id: uuid.UUID,
    key_id: uuid.UUID,
    body: KeyCapPut,
    session: SessionDep,
    key: TenantKey,
    clock: ClockDep,
) -> KeyBudgetOut:
    """For the owner. The key's jobs, sweeps and estimate-priced jobs on this dataset must then
    fit both this cap and the dataset's (409 `key-budget-exceeded` names the key's cap and
    what is left of it). What the key already spent counts; the cap can never go below it."""
    require(key, Role.OWNER)
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    view = key_caps.set_key_cap(session, dataset, key_id, body.setting(), key.id, clock.now())
    return KeyBudgetOut.of(view)


@router.get(
    "/{dataset_id}/budget/keys/{key_id}",
    response_model=KeyBudgetOut,
    responses=responses(401, 403, 404),
)
def budget_key_get(
    dataset_id: uuid.UUID, key_id: uuid.UUID, session: SessionDep, key: TenantKey, clock: ClockDep
) -> KeyBudgetOut:
    """The key's cap on the dataset, what its jobs spent and what is left (404 without a cap)."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    return KeyBudgetOut.of(key_caps.key_cap(session, dataset, key_id, clock.now()))


@router.delete(
    "/{dataset_id}/budget/keys/{key_id}",
    response_model=KeyBudgetOut,
    responses=responses(401, 403, 404),
)
def budget_key_delete(
    dataset_id: uuid.UUID, key_id: uuid.UUID, session: SessionDep, key: TenantKey, clock: ClockDep
) -> KeyBudgetOut:
    """Lift the key's cap (and its pace): it shares what the dataset has left again (the
    dataset's cap still holds). Answers with the cap as it was."""
    require(key, Role.OWNER)
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    return KeyBudgetOut.of(key_caps.lift_key_cap(session, dataset, key_id, clock.now()))


@router.get(
    "/{dataset_id}/budget/keys",
    response_model=list[KeyBudgetRow],
    responses=table_responses(
        "One row per capped key: its cap, spend, what is left, its pace.", 401, 403, 404, 422
    ),
    summary="Every capped key's budget as a flat table (JSON rows or CSV), for dashboards",
)
def budget_keys_table(
    dataset_id: uuid.UUID,
    request: Request,
    session: SessionDep,
    key: TenantKey,
    clock: ClockDep,
    fmt: TableFormat = None,
) -> Response:
    """Reading spends nothing."""
    dataset = ledger.tenant_dataset(session, dataset_id, key.tenant)
    rows = [key_caps.as_dict(v) for v in key_caps.key_caps(session, dataset, clock.now())]
    return table_response(request, fmt, rows, list(KeyBudgetRow.model_fields))
