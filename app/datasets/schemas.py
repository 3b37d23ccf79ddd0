"""Datasets as the API shows them: public metadata, the declared domain, the budget."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.datasets import service as datasets_service
from app.datasets.domain import is_box
from app.ledger.schemas import Budget
from app.models import Dataset, DatasetStatus, DomainKind, Role


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
            domain=Domain.of(ds),
            budget=Budget.of(view.budget),
            created_at=ds.created_at,
            deleted_at=ds.deleted_at,
        )
