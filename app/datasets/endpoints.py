"""Datasets: upload, list, read, delete rows."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile

from app.datasets import service as datasets_service
from app.datasets.domain import (
    MAX_RADIUS,
    MIN_RADIUS,
    DomainSpec,
    parse_json_names,
    parse_json_vector,
)
from app.datasets.schemas import DatasetOut
from app.keys.auth import TenantKey, require
from app.kit.deps import PageCursor, PageLimit, SessionDep, SettingsDep, UnitOfWorkRoute
from app.kit.problems import responses
from app.kit.schemas import Page
from app.models import Role

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


def _optional(**constraints: Any) -> Any:
    """An optional form field (see `_absent_not_null`)."""
    return Form(json_schema_extra=_absent_not_null, **constraints)


# The upload form's fields, as the generated document describes them (Body_datasets_create).
UploadField = Annotated[UploadFile, File(description="CSV with a header row, .npy, or Parquet.")]
NameField = Annotated[
    str,
    Form(
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="1 to 200 characters, not all blank (trimmed).",
    ),
]
EpsilonField = Annotated[float, Form(gt=0, description="The dataset's total epsilon.")]
DeltaField = Annotated[float, Form(gt=0, lt=1, description="The dataset's delta, in (0, 1).")]
RadiusField = Annotated[
    float | None, _optional(ge=MIN_RADIUS, le=MAX_RADIUS, description="Radius of the public ball.")
]
CenterField = Annotated[
    str | None, _optional(pattern=NUMBER_ARRAY, description="Ball centre. " + JSON_ARRAY)
]
LowerField = Annotated[
    str | None,
    _optional(pattern=NUMBER_ARRAY, description="Per-column lower bounds. " + JSON_ARRAY),
]
UpperField = Annotated[
    str | None,
    _optional(pattern=NUMBER_ARRAY, description="Per-column upper bounds. " + JSON_ARRAY),
]
ColumnsField = Annotated[
    str | None,
    _optional(
        pattern=NAME_ARRAY,
        description='Columns to use, by name: a JSON array of strings, e.g. ["x", "y"].',
    ),
]
CountMuField = Annotated[
    float | None,
    _optional(
        gt=0,
        description="The GDP cost of the noisy row count released at upload: finite, > 0 "
        "and below the cap's mu. Default: 0.1 x mu_cap (1% of the budget in GDP terms).",
    ),
]
CountPublicField = Annotated[
    bool,
    Form(
        description="Declare the row count already public: no count is released (nothing "
        "charged), n_rows_dp is the exact N, and jobs are calibrated to replace-one "
        "neighbours. Not with count_mu."
    ),
]


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
    file: UploadField,
    name: NameField,
    epsilon: EpsilonField,
    delta: DeltaField,
    radius: RadiusField = None,
    center: CenterField = None,
    lower: LowerField = None,
    upper: UpperField = None,
    columns: ColumnsField = None,
    count_mu: CountMuField = None,
    count_public: CountPublicField = False,
) -> DatasetOut:
    """Rows are checked completely before the dataset exists, then clipped into the declared
    domain (never rejected; how many were clipped is never recorded).

    The row count N is private under add/remove neighbours: the upload releases
    `n_rows_dp` = N + integer Gaussian noise of std 1/count_mu, charged to the budget as the
    ledger's `count` entry, and every job plans with it. Only the owner's view shows the exact
    `n_rows`. With `count_public=true` the owner declares N public instead: nothing is released
    or charged and jobs use replace-one sensitivities. `warnings` flags a delta above
    1/n_rows_dp."""
    require(key, Role.OWNER)
    domain = DomainSpec(
        radius=radius,
        center=parse_json_vector(center, "center"),
        lower=parse_json_vector(lower, "lower"),
        upper=parse_json_vector(upper, "upper"),
    )
    new = datasets_service.NewDataset(
        name=name,
        epsilon=epsilon,
        delta=delta,
        domain=domain,
        columns=parse_json_names(columns),
        count_mu=count_mu,
        count_public=count_public,
    )
    upload = datasets_service.UploadedFile(file.file, file.filename, file.content_type)
    created = datasets_service.create_dataset(session, key, new, upload, settings)
    return DatasetOut.of(created, key.role)


@router.get("", response_model=Page[DatasetOut], responses=responses(401, 403, 422))
def datasets_list(
    session: SessionDep,
    key: TenantKey,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[DatasetOut]:
    """The tenant's datasets; analysts see n_rows_dp, never the exact n_rows."""
    items, nxt = datasets_service.list_datasets(session, key.tenant, limit, cursor)
    return Page[DatasetOut](items=[DatasetOut.of(v, key.role) for v in items], next_cursor=nxt)


@router.get("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_get(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """A dataset's public metadata (the noisy row count n_rows_dp, d, columns, relation),
    declared domain and budget; the exact n_rows in the owner's view only."""
    return DatasetOut.of(datasets_service.view_dataset(session, dataset_id, key.tenant), key.role)


@router.delete("/{dataset_id}", response_model=DatasetOut, responses=responses(401, 403, 404))
def datasets_delete(dataset_id: uuid.UUID, session: SessionDep, key: TenantKey) -> DatasetOut:
    """Deletes the stored rows. The ledger and released results stay."""
    require(key, Role.OWNER)
    deleted = datasets_service.delete_rows(session, dataset_id, key.tenant)
    return DatasetOut.of(deleted, key.role)
