"""Datasets: upload, list, read, delete rows."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Request, Response, UploadFile
from pydantic import Field

from app.datasets import service as datasets_service
from app.datasets.domain import (
    NAME_LIST,
    NUMBER_LIST,
    DomainSpec,
    parse_json_names,
    parse_json_vector,
)
from app.datasets.schemas import DatasetOut
from app.datasets.table_terms import parse_table_spec
from app.keys.auth import TenantKey, require
from app.kit.deps import PageCursor, PageLimit, SessionDep, SettingsDep, UnitOfWorkRoute
from app.kit.errors import InvalidParameter
from app.kit.problems import responses
from app.kit.schemas import Page, RequestSchema
from app.models import Role
from privclust.clustering.data.limits import MAX_RADIUS, MIN_RADIUS

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=UnitOfWorkRoute)

VECTOR = "Numbers separated by commas (0,0,1.5) or a JSON array ([0, 0, 1.5])."


def _absent_not_null(schema: dict[str, Any]) -> None:
    """An optional form field is left out, never sent as null (multipart has no null: "null"
    would arrive as text), so its schema is the value's own, without a null branch."""
    branches = [b for b in schema.pop("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])


def _binary_part(schema: dict[str, Any]) -> None:
    """The file part: bytes, not text. Spelled both ways generators read it: OpenAPI 3.0's
    `type: string, format: binary` (what openapi-python-client turns into a File) and 3.1's
    `contentMediaType` with no JSON type (what openapi-typescript, without options, leaves
    untyped, so a Blob is taken)."""
    description = schema.get("description")
    schema.clear()
    if description:
        schema["description"] = description
    schema["anyOf"] = [
        {"type": "string", "format": "binary", "contentMediaType": OCTETS},
        {"contentMediaType": OCTETS},
    ]


OCTETS = "application/octet-stream"


def _listed(pattern: str) -> Any:
    """An optional vector field: its schema states the accepted syntax (`pattern`), which the
    service checks itself, so that a refusal explains in words, never with the expression."""

    def extra(schema: dict[str, Any]) -> None:
        _absent_not_null(schema)
        schema["pattern"] = pattern

    return extra


def _form_option(listed: str | None = None, **field: Any) -> Any:
    """An optional form field: absent unless sent (never null), with the syntax of its listed
    values (`listed`, a vector field's pattern) stated in its schema."""
    extra = _absent_not_null if listed is None else _listed(listed)
    return Field(default=None, json_schema_extra=extra, **field)


def _numbers_option(description: str) -> Any:
    """An optional vector of numbers, its syntax stated as a pattern and in words."""
    return _form_option(listed=NUMBER_LIST, description=f"{description} {VECTOR}")


class DatasetUpload(RequestSchema):
    """The upload form (multipart/form-data): the file (or an import's `source`), its name,
    the dataset's total budget and its declared public domain (a ball, or per-column bounds)."""

    # A part without a filename arrives as text: its text is then the file's content (a CSV).
    file: UploadFile | str | None = Field(
        default=None,
        description="CSV with a header row, .npy, or Parquet. Either `file` or `source`. A part "
        "without a filename is read as the file's content (CSV).",
        json_schema_extra=_binary_part,
    )
    source: str | None = _form_option(
        max_length=2000,
        description="Instead of `file`: import by reference from an `s3://` URL or an "
        "absolute local path of a Parquet file or folder, under a prefix the operator allows "
        "(PRIVCLUST_IMPORT_SOURCES; 403 `import-source-forbidden` otherwise). Answers 202 "
        "with the dataset `importing`; a worker copies the rows, then releases the count.",
    )
    name: str = Field(
        min_length=1,
        max_length=200,
        description="1 to 200 characters, not all blank (trimmed).",
        # Stated in the schema; the service checks it and says so in words.
        json_schema_extra={"pattern": r"\S"},
    )
    epsilon: float = Field(gt=0, description="The dataset's total epsilon.")
    delta: float = Field(gt=0, lt=1, description="The dataset's delta, in (0, 1).")
    radius: float | None = _form_option(
        ge=MIN_RADIUS,
        le=MAX_RADIUS,
        description="Radius of the public ball.",
    )
    center: str | None = _numbers_option("Ball centre, one value per column.")
    lower: str | None = _numbers_option(
        "Per-column lower bounds (with `upper`: jobs cluster with each column scaled to its "
        "declared range)."
    )
    upper: str | None = _numbers_option("Per-column upper bounds.")
    columns: str | None = _form_option(
        listed=NAME_LIST,
        description="Columns to use, by name: names separated by commas (x,y) or a JSON array "
        'of strings (["x", "y"]).',
    )
    count_mu: float | None = _form_option(
        gt=0,
        description="The GDP cost of the noisy row count released at upload: finite, > 0 "
        "and below the cap's mu. Default: 0.1 x mu_cap (1% of the budget in GDP terms).",
    )
    count_public: bool = Field(
        default=False,
        description="Declare the row count already public: no count is released (nothing "
        "charged), n_rows_dp is the exact N, and jobs are calibrated to replace-one "
        "neighbours. Not with count_mu.",
    )
    privacy_unit: str | None = _form_option(
        max_length=200,
        description="The column that identifies one unit of privacy (a person, a customer): "
        "each unit keeps at most `max_rows_per_unit` of its rows (chosen uniformly at random) "
        "and every release is calibrated for one unit's rows; the column is not stored. "
        "Without it the guarantee protects one row, not one person.",
    )
    max_rows_per_unit: int | None = _form_option(
        ge=1,
        le=10_000,
        description="m, required with `privacy_unit`: the most rows one unit keeps. Every "
        "release's noise grows m-fold (the guarantee protects all of a unit's rows).",
    )
    missing: Literal["reject", "drop-row", "fill"] | None = _form_option(
        description="Missing values (empty CSV fields, NA, NaN, null, Parquet nulls, NaN in "
        "a .npy; an undeclared category): `reject` (the default: 422 naming the row and "
        "column), `drop-row`, or `fill` (with `fill`; a column not named gets its domain's "
        "centre). Never computed from the data.",
    )
    fill: str | None = _form_option(
        description='With missing="fill": a JSON object of fill values per column, e.g. '
        '{"age": 40, "plan": "basic"}; each inside its declared domain.',
    )
    categories: str | None = _form_option(
        description="Categorical columns and their categories, a JSON object (public), e.g. "
        '{"plan": ["basic", "premium"]}: each is one-hot encoded; needs `lower`/`upper` for '
        "the numeric columns only.",
    )
    members: str | None = _form_option(
        max_length=20_000,
        description="Instead of `file` or `source`: a federated dataset, whose rows stay with "
        'its members. A JSON list of 2 to 16 {"url", "dataset_id", "key"} (each member\'s '
        "privclust, its dataset and a `member` key made there for it). Needs `columns` and a "
        "domain; each member is checked (reachable, same columns and domain) and releases its "
        "part of the noisy row count. A member that refuses is named (409 or 422 "
        "`member-refused`) and nothing is charged anywhere.",
    )
    colluding: int | None = _form_option(
        ge=0,
        le=15,
        description="With `members`: c, how many members may collude with the coordinator "
        "(default 0); the first c + 1 members each add a whole noise share.",
    )
    category_weight: float | None = _form_option(
        gt=0,
        le=1,
        description="The weight w of a one-hot coordinate, where each numeric column spans "
        "[0, 1]: two rows that differ in one category are w*sqrt(2) apart. Default 0.2.",
    )


class _StreamedUploadRoute(UnitOfWorkRoute):
    """The upload's route: its multipart body is parsed as it streams in, and the file part's
    ingest starts before the body has ended (app.datasets.ingest.multipart); FastAPI then
    validates the same form as ever. Once the endpoint has run, an early ingest it did not
    adopt is stopped."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def streamed(request: Request) -> Response:
            # The ingest imports pyarrow: loaded by the first upload, not at start-up.
            from app.datasets.ingest.multipart import StreamedUploadRequest

            upload = StreamedUploadRequest(request.scope, request.receive)
            try:
                return await handle(upload)
            finally:
                await upload.finish()

        return streamed


def datasets_create(
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    form: Annotated[DatasetUpload, Form(media_type="multipart/form-data")],
    response: Response,
) -> DatasetOut:
    """Rows are checked completely before the dataset exists, then clipped into the declared
    domain (never rejected; how many were clipped is never recorded). With per-column bounds
    (`lower`, `upper`) every row is clipped into that box, and jobs cluster where each column is
    mapped onto [0, 1] by its bounds; centres come back in the columns' own units.

    The row count N is private under add/remove neighbours: the upload releases
    `n_rows_dp` = N + integer Gaussian noise of std 1/count_mu, charged to the budget as the
    ledger's `count` entry, and every job plans with it. Only the owner's view shows the exact
    `n_rows`. With `count_public=true` the owner declares N public instead: nothing is released
    or charged and jobs use replace-one sensitivities. `warnings` flags a delta above
    1/n_rows_dp.

    With `source` instead of `file` the rows are imported by reference (answer 202, `status:
    "importing"`): a worker reads the source with the same checks, clips and stores the rows,
    then charges and releases the count; the dataset is then `ready`, or `failed` with a
    `failure_reason`. Object storage that cannot be reached: 503 `storage-unavailable`, nothing
    created or charged."""
    require(key, Role.OWNER)
    new = _requested(form)
    if form.members is not None:
        if form.file is not None or form.source is not None:
            raise InvalidParameter(
                "a federated dataset (`members`) takes no `file` or `source`", field="members"
            )
        colluding = form.colluding or 0
        made = datasets_service.create_federated_dataset(
            session, key, new, form.members, colluding, settings
        )
        return DatasetOut.of(made, key.role)
    if (form.file is None) == (form.source is None):
        raise InvalidParameter(
            "send either `file` (an upload) or `source` (an import)", field="file"
        )
    if form.source is not None:
        response.status_code = 202
        accepted = datasets_service.import_dataset(session, key, new, form.source, settings)
        return DatasetOut.of(accepted, key.role)
    file = form.file
    assert file is not None
    if isinstance(file, str):
        upload = datasets_service.UploadedFile(io.BytesIO(file.encode()), None, None)
    else:
        upload = datasets_service.UploadedFile(file.file, file.filename, file.content_type)
    created = datasets_service.create_dataset(session, key, new, upload, settings)
    return DatasetOut.of(created, key.role)


router.add_api_route(
    "",
    datasets_create,
    methods=["POST"],
    status_code=201,
    response_model=DatasetOut,
    responses={
        202: {"model": DatasetOut, "description": "An import by reference was accepted"},
        **responses(400, 401, 403, 409, 413, 415, 422, 502, 503),
    },
    summary="Upload a dataset (or import one by reference) with its public domain and total "
    "privacy budget",
    route_class_override=_StreamedUploadRoute,
)


def _requested(form: DatasetUpload) -> datasets_service.NewDataset:
    """What the form asks for, its vector fields parsed (a malformed one: 422 naming it)."""
    domain = DomainSpec(
        radius=form.radius,
        center=parse_json_vector(form.center, "center"),
        lower=parse_json_vector(form.lower, "lower"),
        upper=parse_json_vector(form.upper, "upper"),
    )
    return datasets_service.NewDataset(
        name=form.name,
        epsilon=form.epsilon,
        delta=form.delta,
        domain=domain,
        columns=parse_json_names(form.columns),
        count_mu=form.count_mu,
        count_public=form.count_public,
        table=parse_table_spec(
            missing=form.missing,
            fill=form.fill,
            categories=form.categories,
            category_weight=form.category_weight,
            privacy_unit=form.privacy_unit,
            max_rows_per_unit=form.max_rows_per_unit,
        ),
    )


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
