"""The budget and the ledger as the API shows them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.kit.schemas import RequestBody, coarse_time, from_attributes
from app.ledger.service import BudgetView
from app.models import LedgerEntry, Role


class Budget(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "epsilon": 3.0,
                "delta": 1e-6,
                "mu_cap": 0.8,
                "mu_spent": 0.35,
                "mu_reserved": 0.0,
                "mu_remaining": 0.72,
                "epsilon_remaining": 2.6,
                "jobs": 1,
            }
        }
    )
    epsilon: float = Field(description="The cap's epsilon, as the owner set it.")
    delta: float = Field(description="The cap's delta; jobs' epsilons are read at this delta.")
    mu_cap: float = Field(description="The cap as Gaussian DP (rounded down, safely).")
    mu_spent: float
    mu_reserved: float = Field(description="Admitted jobs that have not drawn noise yet.")
    mu_remaining: float = Field(description="sqrt(mu_cap^2 - spent^2 - reserved^2).")
    epsilon_remaining: float = Field(
        description="The epsilon at the dataset's delta that mu_remaining still allows."
    )
    jobs: int

    @classmethod
    def of(cls, view: BudgetView) -> Budget:
        return cls(**view.__dict__)


class BudgetPatch(RequestBody):
    model_config = ConfigDict(json_schema_extra={"example": {"epsilon": 5.0}})
    epsilon: float = Field(gt=0, description="The new total epsilon.")
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="The new delta (default: unchanged)."
    )


class LedgerEntryOut(BaseModel):
    id: int
    kind: Literal[
        "cap", "count", "reserve", "commit", "refund", "succeeded", "failed", "cancelled"
    ] = Field(
        description="`cap`: the cap set or changed; `count`: the noisy row count released at "
        "upload (spent for good); `reserve`, `commit`, `refund`: a job's charge; `succeeded`, "
        "`failed`, `cancelled`: audit only."
    )
    job_id: uuid.UUID | None
    sweep_id: uuid.UUID | None = Field(
        default=None, description="The sweep that admitted the entry's job, if any."
    )
    actor: uuid.UUID | None = Field(description="The API key id that caused the entry.")
    mu: float | None
    sigma: float | None
    iterations: int | None = Field(
        description="Number of Gaussian releases of the job (1 for the row count)."
    )
    epsilon: float | None
    delta: float | None
    note: str | None
    created_at: datetime

    @classmethod
    def of(cls, e: LedgerEntry, role: str) -> LedgerEntryOut:
        """The entry as `role` may see it: its time to the minute for analysts."""
        return from_attributes(
            cls,
            e,
            actor=e.actor_key_id,
            iterations=e.releases,
            created_at=coarse_time(e.created_at, exact=role == Role.OWNER),
        )


class LedgerOut(BaseModel):
    dataset_id: uuid.UUID
    entries: list[LedgerEntryOut] = Field(
        description="A page of the entries: oldest first, or newest first with `order=desc`."
    )
    budget: Budget = Field(description="The dataset's budget now (whatever the page).")
    next_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the entries after this page; null on the last page.",
    )
