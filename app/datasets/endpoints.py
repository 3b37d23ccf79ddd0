"""Datasets: upload, list, read, delete rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile

from app.datasets import repository as repo
from app.datasets import service as datasets_service
from app.datasets.schemas import DatasetOut
from app.kit.deps import (
    PageCursor,
    PageLimit,
    SessionDep,
    SettingsDep,
    TenantKey,
    UnitOfWorkRoute,
    require,
)
from app.kit.problems import responses
from app.kit.schemas import Page
from app.ledger import service as ledger

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=UnitOfWorkRoute)

JSON_ARRAY = "A JSON array, e.g. [0, 0, 0]."
# The form fields that carry JSON are plain strings to multipart; these patterns say which
# strings the server can read (the server still checks finiteness and the lengths against the
# file's columns). A JSON number, then a JSON array of them, and of non-empty JSON strings.
_WS = r"[ \t\n\r]*"  # JSON's whitespace only (a regex's \s allows more than json.loads)
_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
NUMBER_ARRAY = rf"^{_WS}\[{_WS}{_NUMBER}({_WS},{_WS}{_NUMBER})*{_WS}\]{_WS}$"
_NAME = r'"([^"\\\x00-\x1f]|\\["\\/bfnrt])+"'
NAME_ARRAY = rf"^{_WS}\[{_WS}{_NAME}({_WS},{_WS}{_NAME})*{_WS}\]{_WS}$"


def _absent_not_null(schema: dict[str, Any]) -> None:
    """An optional form field is left out, never sent as null (multipart has no null: "null"
    would arrive as text), so its schema is the value's own, without a null branch."""
    branches = [b for b in schema.pop("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])


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
    name: Annotated[
        str,
        Form(
            min_length=1,
            max_length=200,
            pattern=r"\S",
            description="1 to 200 characters, not all blank (trimmed).",
        ),
    ],
    epsilon: Annotated[float, Form(gt=0, description="The dataset's total epsilon.")],
    delta: Annotated[float, Form(gt=0, lt=1, description="The dataset's delta, in (0, 1).")],
    radius: Annotated[
        float | None,
        Form(
            json_schema_extra=_absent_not_null,
            ge=datasets_service.MIN_RADIUS,
            le=datasets_service.MAX_RADIUS,
            description="Radius of the public ball.",
        ),
    ] = None,
    center: Annotated[
        str | None,
        Form(
            json_schema_extra=_absent_not_null,
            pattern=NUMBER_ARRAY,
            description="Ball centre. " + JSON_ARRAY,
        ),
    ] = None,
    lower: Annotated[
        str | None,
        Form(
            json_schema_extra=_absent_not_null,
            pattern=NUMBER_ARRAY,
            description="Per-column lower bounds. " + JSON_ARRAY,
        ),
    ] = None,
    upper: Annotated[
        str | None,
        Form(
            json_schema_extra=_absent_not_null,
            pattern=NUMBER_ARRAY,
            description="Per-column upper bounds. " + JSON_ARRAY,
        ),
    ] = None,
    columns: Annotated[
        str | None,
        Form(
            json_schema_extra=_absent_not_null,
            pattern=NAME_ARRAY,
            description='Columns to use, by name: a JSON array of strings, e.g. ["x", "y"].',
        ),
    ] = None,
    count_mu: Annotated[
        float | None,
        Form(
            json_schema_extra=_absent_not_null,
            gt=0,
            description="The GDP cost of the noisy row count released at upload: finite, > 0 "
            "and below the cap's mu. Default: 0.1 x mu_cap (1% of the budget in GDP terms).",
        ),
    ] = None,
    count_public: Annotated[
        bool,
        Form(
            description="Declare the row count already public: no count is released (nothing "
            "charged), n_rows_dp is the exact N, and jobs are calibrated to replace-one "
            "neighbours. Not with count_mu."
        ),
    ] = False,
) -> DatasetOut:
    """Rows are checked completely before the dataset exists, then clipped into the declared
    domain (never rejected; how many were clipped is never recorded).

    The row count N is private under add/remove neighbours: the upload releases
    `n_rows_dp` = N + integer Gaussian noise of std 1/count_mu, charged to the budget as the
    ledger's `count` entry, and every job plans with it. Only the owner's view shows the exact
    `n_rows`. With `count_public=true` the owner declares N public instead: nothing is released
    or charged and jobs use replace-one sensitivities. `warnings` flags a delta above
    1/n_rows_dp."""
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
        count_mu=count_mu,
        count_public=count_public,
    )
    try:
        # The answer is built before the commit: if it cannot be, nothing was created.
        out = DatasetOut.of(dataset, ledger.budget(session, dataset), key.role)
        session.commit()
    except BaseException:
        session.rollback()
        Path(str(dataset.storage_path)).unlink(missing_ok=True)
        raise
    return out


@router.get("", response_model=Page[DatasetOut], responses=responses(401, 403, 422))
def datasets_list(
    session: SessionDep,
    key: TenantKey,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[DatasetOut]:
    """The tenant's datasets; analysts see n_rows_dp, never the exact n_rows."""
    items, nxt = repo.list_datasets(session, key.tenant, limit, cursor)
    return Page[DatasetOut](
        items=[DatasetOut.of(d, ledger.budget(session, d), key.role) for d in items],
        next_cursor=nxt,
    )


@router.get("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """A dataset's public metadata (the noisy row count n_rows_dp, d, columns, relation),
    declared domain and budget; the exact n_rows in the owner's view only."""
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    return DatasetOut.of(dataset, ledger.budget(session, dataset), key.role)


@router.delete("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_delete(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """Deletes the stored rows. The ledger and released results stay."""
    require(key, "owner")
    dataset = datasets_service.get_dataset(session, dataset_id, key.tenant)
    stored = datasets_service.delete_rows(session, dataset)
    out = DatasetOut.of(dataset, ledger.budget(session, dataset), key.role)
    session.commit()
    datasets_service.remove_stored_rows(stored)
    return out
