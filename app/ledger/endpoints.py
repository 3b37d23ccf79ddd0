"""A dataset's budget and its ledger: read the budget, change the cap, read the entries."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from app.datasets import service as datasets_service
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
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
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
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    return Budget.of(ledger.update_cap(session, dataset, body.epsilon, body.delta, key.id))


@router.get(
    "/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(401, 403, 404),
)
def ledger_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> LedgerOut:
    """The append-only ledger entries behind the budget, oldest first."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    entries, budget = ledger.entries_and_budget(session, dataset)
    return LedgerOut(
        dataset_id=dataset.id,
        entries=[LedgerEntryOut.of(e) for e in entries],
        budget=Budget.of(budget),
    )
