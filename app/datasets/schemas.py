"""Datasets as the API shows them: public metadata, the declared domain, the budget."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.datasets import service as datasets_service
from app.datasets.domain import is_box
from app.ledger.schemas import Budget
from app.models import Dataset, DomainKind, Role


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
    n_rows_dp: int = Field(
        description="The row count everyone may see: N plus integer Gaussian noise, released "
        "once at upload (floored at 0) and charged to the budget as the ledger's `count` entry; "
        "exactly N when the owner declared the count public. Jobs plan with this count."
    )
    n_rows: int | None = Field(
        default=None,
        description="The exact row count: in the owner's view only (null for analysts). Under "
        "add/remove neighbours N is private.",
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
    n_cols: int
    columns: list[str]
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
        return cls(
            id=ds.id,
            name=ds.name,
            n_rows_dp=ds.n_rows_dp,
            n_rows=ds.n_rows if role == Role.OWNER else None,
            count_public=ds.count_public,
            count_mu=ds.count_mu,
            relation=datasets_service.planning_count(ds).relation,
            warnings=datasets_service.dataset_warnings(ds),
            n_cols=ds.n_cols,
            columns=list(ds.columns),
            domain=Domain.of(ds),
            budget=Budget.of(view.budget),
            created_at=ds.created_at,
            deleted_at=ds.deleted_at,
        )
