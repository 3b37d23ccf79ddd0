"""The budget and the ledger as the API shows them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.kit.schemas import RequestBody, coarse_time, from_attributes
from app.ledger.key_caps import KeyBudgetView, KeyCapSetting, PaceSetting, PaceView
from app.ledger.pace import PacePeriod
from app.ledger.service import BudgetView
from app.models import LedgerEntry, Role

RefusedBy = Literal["dataset", "key", "dataset-pace", "key-pace"]


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

    @classmethod
    def maybe(cls, view: BudgetView | None) -> Budget | None:
        return None if view is None else cls.of(view)


class KeyPricing(BaseModel):
    """What an estimate adds for the limits beyond the dataset's cap: which would refuse, and
    the asking key's cap before and after."""

    refused_by: RefusedBy | None = Field(
        default=None,
        description="When not admissible: the limit that would refuse it (`dataset`: the "
        "dataset's cap; `key`: your key's cap; `dataset-pace` or `key-pace`: a pace).",
    )
    key_budget: Budget | None = Field(
        default=None, description="Your key's cap on the dataset now, if it has one."
    )
    key_budget_after: Budget | None = Field(
        default=None, description="Your key's cap if this were admitted now (what it leaves)."
    )


class BudgetDetail(Budget):
    """The budget with its pace and each capped key's cap and spend (the budget's own view)."""

    pace: PaceOut | None = Field(
        default=None,
        description="The dataset's pace, if any: a rate limit on spending per UTC period, "
        "under the cap, which stays the lifetime guarantee and never renews.",
    )
    keys: list[KeyBudgetOut] = Field(
        description="Each capped key's cap and spend on the dataset (keys without a cap share "
        "what the dataset has left)."
    )

    @classmethod
    def detail(
        cls, view: BudgetView, pace: PaceView | None, keys: list[KeyBudgetView]
    ) -> BudgetDetail:
        return cls(
            **view.__dict__,
            pace=None if pace is None else PaceOut.of(pace),
            keys=[KeyBudgetOut.of(k) for k in keys],
        )


class PaceIn(RequestBody):
    period: Literal["day", "week", "month"] = Field(
        description="The period, in UTC: a calendar day, an ISO week (from Monday 00:00) or a "
        "calendar month."
    )
    mu: float = Field(gt=0, description="At most this mu (GDP-composed) admitted per period.")

    def setting(self) -> PaceSetting:
        return PaceSetting(PacePeriod(self.period), self.mu)


class PaceOut(BaseModel):
    period: Literal["day", "week", "month"]
    mu: float = Field(description="At most this mu admitted per period.")
    mu_used: float = Field(description="What this period has admitted (refunds not given back).")
    mu_remaining: float = Field(description="What this period still admits, before the caps.")
    period_start: datetime
    renews_at: datetime = Field(description="When the next period starts (UTC).")

    @classmethod
    def of(cls, view: PaceView) -> PaceOut:
        return from_attributes(cls, view)


class BudgetPatch(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={"example": {"epsilon": 5.0, "pace": {"period": "day", "mu": 0.5}}}
    )
    epsilon: float | None = Field(
        default=None, gt=0, description="The new total epsilon (default: unchanged)."
    )
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="The new delta (default: unchanged)."
    )
    pace: PaceIn | None = Field(
        default=None,
        description="A pace (at most `mu` per `period`); `null` removes it; absent: unchanged.",
    )


class KeyCapPut(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={"example": {"epsilon": 1.0, "pace": {"period": "week", "mu": 0.3}}}
    )
    epsilon: float | None = Field(
        default=None, gt=0, description="The key's cap as epsilon (at `delta`); or give `mu`."
    )
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="With epsilon (default: the dataset's delta)."
    )
    mu: float | None = Field(default=None, gt=0, description="The key's cap as GDP mu.")
    pace: PaceIn | None = Field(default=None, description="A pace under the key's cap.")

    def setting(self) -> KeyCapSetting:
        pace = None if self.pace is None else self.pace.setting()
        return KeyCapSetting(self.epsilon, self.delta, self.mu, pace)


class KeyBudgetOut(BaseModel):
    key_id: uuid.UUID
    epsilon: float = Field(description="The cap's epsilon (at `delta`), as set or read from mu.")
    delta: float
    mu_cap: float
    mu_spent: float = Field(description="What the key's jobs on the dataset spent (GDP).")
    mu_reserved: float
    mu_remaining: float = Field(description="What is left of the key's cap.")
    epsilon_remaining: float
    jobs: int
    pace: PaceOut | None = None

    @classmethod
    def of(cls, view: KeyBudgetView) -> KeyBudgetOut:
        pace = None if view.pace is None else PaceOut.of(view.pace)
        return cls(key_id=view.key_id, pace=pace, **view.budget.__dict__)


class KeyBudgetRow(BaseModel):
    """A capped key's budget as one flat row."""

    key_id: uuid.UUID
    epsilon: float
    delta: float
    mu_cap: float
    mu_spent: float
    mu_reserved: float
    mu_remaining: float
    epsilon_remaining: float
    jobs: int
    pace_period: str | None
    pace_mu: float | None
    pace_mu_used: float | None
    pace_mu_remaining: float | None
    pace_renews_at: datetime | None


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
    budget: BudgetDetail = Field(description="The dataset's budget now (whatever the page).")
    next_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the entries after this page; null on the last page.",
    )


BudgetDetail.model_rebuild()
