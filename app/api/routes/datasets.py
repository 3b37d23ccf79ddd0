"""Datasets and their budgets: upload, read, delete rows, budget, ledger, cap changes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile

from app.api.deps import SessionDep, SettingsDep, TenantKey, UnitOfWorkRoute, require
from app.api.problems import responses
from app.api.schemas import (
    Budget,
    BudgetPatch,
    DatasetOut,
    LedgerEntryOut,
    LedgerOut,
    Page,
)
from app.db import repositories as repo
from app.services import datasets as datasets_service
from app.services import ledger

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=UnitOfWorkRoute)
budget_router = APIRouter(prefix="/v1/datasets", tags=["budget"], route_class=UnitOfWorkRoute)

JSON_ARRAY = "A JSON array, e.g. [0, 0, 0]."


@router.post(
    "",
    status_code=201,
    response_model=DatasetOut,
    responses=responses(400, 401, 403, 413, 415, 422, 503),
    summary="Upload a dataset with its public domain and total privacy budget",
)
def datasets_create(
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    file: Annotated[UploadFile, File(description="CSV with a header row, .npy, or Parquet.")],
    name: Annotated[str, Form(min_length=1, max_length=200)],
    epsilon: Annotated[float, Form(description="The dataset's total epsilon.")],
    delta: Annotated[float, Form(description="The dataset's delta, in (0, 1).")],
    radius: Annotated[float | None, Form(description="Radius of the public ball.")] = None,
    center: Annotated[str | None, Form(description="Ball centre. " + JSON_ARRAY)] = None,
    lower: Annotated[str | None, Form(description="Per-column lower bounds. " + JSON_ARRAY)] = None,
    upper: Annotated[str | None, Form(description="Per-column upper bounds. " + JSON_ARRAY)] = None,
    columns: Annotated[str | None, Form(description="Columns to use, by name. JSON array.")] = None,
) -> DatasetOut:
    """Rows are checked completely before the dataset exists; rows outside the declared domain
    are clipped into it when clustering (never rejected, never counted for analysts). N and d
    are public metadata."""
    require(key, "owner")
    domain = datasets_service.DomainSpec(
        radius=radius,
        center=datasets_service.parse_json_vector(center, "center"),
        lower=datasets_service.parse_json_vector(lower, "lower"),
        upper=datasets_service.parse_json_vector(upper, "upper"),
    )
    dataset = datasets_service.create_dataset(
        session,
        tenant=key.tenant,
        actor=key.id,
        name=name,
        src=file.file,
        filename=file.filename,
        content_type=file.content_type,
        storage_dir=settings.datasets_dir,
        epsilon=epsilon,
        delta=delta,
        domain=domain,
        columns=datasets_service.parse_json_names(columns),
        max_bytes=settings.max_upload_bytes,
    )
    try:
        session.commit()
    except BaseException:
        Path(str(dataset.storage_path)).unlink(missing_ok=True)
        raise
    return DatasetOut.of(dataset, ledger.budget(session, dataset))


@router.get("", response_model=Page[DatasetOut], responses=responses(401, 403, 422))
def datasets_list(
    session: SessionDep,
    key: TenantKey,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: str | None = None,
) -> Page[DatasetOut]:
    items, nxt = repo.list_datasets(session, key.tenant, limit, cursor)
    return Page[DatasetOut](
        items=[DatasetOut.of(d, ledger.budget(session, d)) for d in items], next_cursor=nxt
    )


@router.get("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """A dataset's public metadata, declared domain and budget."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    return DatasetOut.of(dataset, ledger.budget(session, dataset))


@router.delete("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_delete(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """Deletes the stored rows. The ledger and released results stay."""
    require(key, "owner")
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    datasets_service.delete_rows(session, dataset)
    session.commit()
    return DatasetOut.of(dataset, ledger.budget(session, dataset))


@budget_router.get(
    "/{dataset_id}/budget",
    response_model=Budget,
    responses=responses(401, 403, 404),
)
def budget_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> Budget:
    """The dataset's privacy budget: cap, spent, reserved and remaining (as mu and epsilon)."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    return Budget.of(ledger.budget(session, dataset))


@budget_router.patch(
    "/{dataset_id}/budget",
    response_model=Budget,
    responses=responses(401, 403, 404, 422),
)
def budget_update(
    dataset_id: uuid.UUID, body: BudgetPatch, session: SessionDep, key: TenantKey
) -> Budget:
    """Change the cap (audited in the ledger); it can never go below what is spent."""
    require(key, "owner")
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    delta = dataset.delta if body.delta is None else body.delta
    datasets_service.check_budget(body.epsilon, delta)
    ledger.begin_budget_transaction(session)
    dataset = ledger.change_cap(session, dataset_id, body.epsilon, delta, key.id)
    session.commit()
    return Budget.of(ledger.budget(session, dataset))


@budget_router.get(
    "/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(401, 403, 404),
)
def ledger_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> LedgerOut:
    """The append-only ledger entries behind the budget, oldest first."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    entries = repo.ledger_entries(session, dataset.id)
    return LedgerOut(
        dataset_id=dataset.id,
        entries=[LedgerEntryOut.of(e) for e in entries],
        budget=Budget.of(ledger.view(dataset, ledger.replay(entries))),
    )
