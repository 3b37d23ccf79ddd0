"""Datasets as the API shows them: public metadata, the declared domain, the budget."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.datasets import federated
from app.datasets import service as datasets_service
from app.datasets.domain import is_box
from app.datasets.table_terms import ROW_UNIT
from app.ledger.schemas import Budget
from app.models import Dataset, DatasetKind, DatasetStatus, DomainKind, Role
from privclust.tabular import TableSpec


class Domain(BaseModel):
    center: list[float] = Field(
        description="The centre of the ball every row lies in (for a box: the ball around it)."
    )
    radius: float = Field(description="That ball's radius.")
    kind: Literal["ball", "box"] = Field(
        description="`ball`: declared as a centre and radius; jobs cluster in the columns' own "
        "units. `box`: declared as per-column bounds; jobs cluster in the scaled space, where "
        "each column is mapped onto [0, 1] by its bounds, and centres come back in the "
        "columns' own units. Datasets uploaded before boxes were kept are `ball`."
    )
    lower: list[float] | None = Field(
        default=None, description="A box's declared lower bound per column (null for a ball)."
    )
    upper: list[float] | None = Field(
        default=None, description="A box's declared upper bound per column (null for a ball)."
    )

    @classmethod
    def of(cls, ds: Dataset) -> Domain:
        box = is_box(ds)
        return cls(
            center=ds.center,
            radius=ds.radius,
            kind=DomainKind.BOX.value if box else DomainKind.BALL.value,
            lower=ds.lower if box else None,
            upper=ds.upper if box else None,
        )


class FederationMemberOut(BaseModel):
    position: int = Field(description="The member's place in the federation's public order.")
    url: str
    dataset_id: str = Field(description="The member's dataset, on its own server.")
    fingerprint: str = Field(description="The fingerprint of the member's X25519 key.")


class DatasetOut(BaseModel):
    id: uuid.UUID
    name: str
    status: Literal["importing", "ready", "failed"] = Field(
        description="`ready`: its rows are stored and jobs may run on it (an upload is ready "
        "when it is created). `importing`: an import by reference is copying its source "
        "(`progress`); jobs, sweeps and estimates get 409 `dataset-not-ready` until it is "
        "ready. `failed`: the import stopped (`failure_reason`); nothing can run on it."
    )
    progress: float | None = Field(
        description="An import's fraction of its source's bytes read, 0 to 1, in the owner's "
        "view only (null for analysts: how fast it grows tells the source's size; null for an "
        "upload)."
    )
    failure_reason: str | None = Field(
        default=None,
        description="Why the import failed, in the owner's view only (null for analysts): "
        "the file, row and column at fault, never a value.",
    )
    source: str | None = Field(
        default=None,
        description="Where an import read its rows from, in the owner's view only (null for "
        "analysts and for uploads). Later changes there do not change the dataset.",
    )
    n_rows_dp: int | None = Field(
        description="The row count everyone may see: N plus integer Gaussian noise, released "
        "once (floored at 0) and charged to the budget as the ledger's `count` entry; exactly N "
        "when the owner declared the count public. Jobs plan with this count. Null until an "
        "import is ready."
    )
    n_rows: int | None = Field(
        default=None,
        description="The exact row count: in the owner's view only (null for analysts, and "
        "until an import has stored its rows). Under add/remove neighbours N is private.",
    )
    count_public: bool = Field(
        description="The owner declared the row count public: no count was released and jobs "
        "are calibrated to replace-one neighbours."
    )
    count_mu: float | None = Field(
        description="The GDP cost of the noisy row count (null when the count is public)."
    )
    relation: Literal["add-remove", "replace-one"] = Field(
        description="The neighbouring relation the guarantee is stated for: `add-remove` "
        "(datasets differ by one row added or removed; N is private), or `replace-one` when "
        "the owner declared the count public."
    )
    warnings: list[str] = Field(
        description="Advice about the parameters, e.g. a delta above 1/n_rows_dp (the usual "
        "rule of thumb asks for delta well below 1/n)."
    )
    n_cols: int | None = Field(
        description="The number of columns d (null until an import has read its source)."
    )
    columns: list[str] = Field(
        description="The column names (while importing: the `columns` asked for, if any)."
    )
    privacy_unit: str = Field(
        description="What one unit of privacy is: `row` (the guarantee protects one row, not "
        "one person: a person with many rows is protected only at their number of rows times "
        "the charged mu), or the name of the column that identified each unit at upload (a "
        "person, a customer; the column itself was not stored)."
    )
    max_rows_per_unit: int | None = Field(
        description="m: the most rows one unit kept (each unit's rows beyond m were dropped, "
        "chosen uniformly at random); every release is calibrated for neighbours that differ "
        "by one unit's up to m rows. Null when the unit is a row."
    )
    missing: Literal["reject", "drop-row", "fill"] = Field(
        description="How missing values were handled: refused, rows dropped, or filled."
    )
    fill: dict[str, float | str] = Field(
        description="The declared fill values (a column not named: its domain's centre)."
    )
    categories: dict[str, list[str]] = Field(
        description="The declared categories of each categorical column (one-hot encoded as "
        "`column=value` columns)."
    )
    category_weight: float | None = Field(
        description="The weight w of a one-hot coordinate where columns are scaled onto [0, 1] "
        "(null without categories)."
    )
    table_counts: dict[str, int] | None = Field(
        default=None,
        description="What the missing-value policy and the unit bound did (rows read, dropped "
        "or filled): in the owner's view only, like n_rows.",
    )
    kind: Literal["stored", "federated"] = Field(
        default="stored",
        description="`federated`: no row is stored here; the rows are the members' and every "
        "release is their secure sum.",
    )
    members: list[FederationMemberOut] | None = Field(
        default=None,
        description="A federated dataset's members in the federation's order, with the "
        "fingerprints of their keys (compare them out of band); never their API keys.",
    )
    colluding: int | None = Field(
        default=None, description="A federated dataset's c (colluding members tolerated)."
    )
    domain: Domain
    budget: Budget
    created_at: datetime
    deleted_at: datetime | None = Field(
        default=None, description="When the rows were deleted (ledger and results remain)."
    )

    @classmethod
    def of(cls, view: datasets_service.DatasetView, role: str) -> DatasetOut:
        """The dataset as `role` may see it: the exact row count for its owner only."""
        ds = view.dataset
        owner = role == Role.OWNER
        return cls(
            id=ds.id,
            name=ds.name,
            status=DatasetStatus(ds.status or DatasetStatus.READY).value,
            progress=ds.progress if owner else None,
            failure_reason=ds.failure_reason if owner else None,
            source=ds.source if owner else None,
            n_rows_dp=ds.n_rows_dp,
            n_rows=ds.n_rows if owner else None,
            count_public=ds.count_public,
            count_mu=ds.count_mu,
            relation=datasets_service.relation_of(ds),
            warnings=datasets_service.dataset_warnings(ds),
            n_cols=ds.n_cols if datasets_service.is_ready(ds) else None,
            columns=list(ds.columns),
            **table_fields(ds, owner),
            kind=ds.kind or DatasetKind.STORED.value,
            members=federated.member_view(ds),
            colluding=None if ds.federation is None else int(ds.federation["colluding"]),
            domain=Domain.of(ds),
            budget=Budget.of(view.budget),
            created_at=ds.created_at,
            deleted_at=ds.deleted_at,
        )


def table_fields(ds: Dataset, owner: bool) -> dict[str, Any]:
    """A dataset's table terms as the API shows them (the counts to its owner only)."""
    spec = TableSpec.of(ds.table_spec)
    return {
        "privacy_unit": spec.privacy_unit or ROW_UNIT,
        "max_rows_per_unit": spec.max_rows_per_unit,
        "missing": spec.missing,
        "fill": dict(spec.fill),
        "categories": {c: list(v) for c, v in spec.categories.items()},
        "category_weight": spec.category_weight if spec.categories else None,
        "table_counts": ds.ingest_counts if owner else None,
    }
