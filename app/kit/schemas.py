"""Pydantic request and response models of the REST contract (docs/api.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.datasets import service as datasets_service
from app.ledger.service import BudgetView
from app.models import ApiKey, Dataset, Job, LedgerEntry, Sweep

T = TypeVar("T")


def _integral(value: object) -> object:
    """A JSON number with no fractional part (2.0) is an integer in JSON Schema: take it as 2.
    Anything else passes through to the strict check (so `true` and `"2"` stay refused)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


# An integer as JSON Schema means it: 2 and 2.0, never true or "2".
JsonInt = Annotated[int, BeforeValidator(_integral)]
# A job parameter: 1 to 1000 (the bounds inside the type, so the schema states them).
ParamInt = Annotated[int, Field(ge=1, le=1000), BeforeValidator(_integral)]


class RequestBody(BaseModel):
    """A JSON request body: strict types (no `true` for 1, no `"2"` for 2), no unknown fields,
    no NaN or infinity. What the schema says (`integer`, `number`, `string`) is what is taken;
    a JSON integer is still a valid `number`."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to get the next page; null on the last."
    )


# --- keys --------------------------------------------------------------------------------------


class ApiKeyCreate(RequestBody):
    model_config = ConfigDict(json_schema_extra={"example": {"tenant": "acme", "role": "owner"}})
    tenant: str = Field(min_length=1, max_length=100)
    role: Literal["admin", "owner", "analyst"]


Role = Literal["admin", "owner", "analyst"]
AlgorithmName = Literal["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"]
AlgorithmChoice = Literal["auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"]


class ApiKeyOut(BaseModel):
    id: uuid.UUID
    tenant: str
    role: Role
    prefix: str = Field(description="The first characters of the key, to tell keys apart.")
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyOut:
        return cls(
            id=key.id,
            tenant=key.tenant,
            role=key.role,
            prefix=key.prefix,
            created_at=key.created_at,
            revoked_at=key.revoked_at,
        )


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The secret. Shown only in this response; store it now.")


# --- datasets and budget -----------------------------------------------------------------------


class Domain(BaseModel):
    center: list[float]
    radius: float


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
    def of(cls, ds: Dataset, budget: BudgetView, role: str) -> DatasetOut:
        """The dataset as `role` may see it: the exact row count for its owner only."""
        return cls(
            id=ds.id,
            name=ds.name,
            n_rows_dp=ds.n_rows_dp,
            n_rows=ds.n_rows if role == "owner" else None,
            count_public=ds.count_public,
            count_mu=ds.count_mu,
            relation=datasets_service.planning_count(ds).relation,
            warnings=datasets_service.dataset_warnings(ds),
            n_cols=ds.n_cols,
            columns=list(ds.columns),
            domain=Domain(center=ds.center, radius=ds.radius),
            budget=Budget.of(budget),
            created_at=ds.created_at,
            deleted_at=ds.deleted_at,
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
    def of(cls, e: LedgerEntry) -> LedgerEntryOut:
        return cls(
            id=e.id,
            kind=e.kind,
            job_id=e.job_id,
            sweep_id=e.sweep_id,
            actor=e.actor_key_id,
            mu=e.mu,
            sigma=e.sigma,
            iterations=e.releases,
            epsilon=e.epsilon,
            delta=e.delta,
            note=e.note,
            created_at=e.created_at,
        )


class LedgerOut(BaseModel):
    dataset_id: uuid.UUID
    entries: list[LedgerEntryOut]
    budget: Budget


# --- jobs --------------------------------------------------------------------------------------


class JobParams(RequestBody):
    iterations: ParamInt | None = Field(
        default=None,
        description="PE-means iterations (HDPE-means: those in the projection; pe-lloyd: its "
        "PE-means part), FastLloyd's Lloyd steps, or lsh-coreset's tree levels (defaults in "
        "docs/algorithms.md).",
    )
    variations: ParamInt | None = Field(
        default=None,
        description="PE-means, HDPE-means, pe-lloyd: initial variations per centroid L.",
    )
    projection_dim: ParamInt | None = Field(
        default=None, description="HDPE-means projection dimension p."
    )


class JobCreate(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={"example": {"algorithm": "auto", "k": 4, "epsilon": 1.0}}
    )
    algorithm: AlgorithmChoice = Field(
        default="auto",
        description="PE-means, HDPE-means (high dimensions), FastLloyd (noisy Lloyd steps), "
        "lsh-coreset (a private LSH-tree coreset), pe-lloyd (PE-means, then a noisy Lloyd "
        "step), or auto (chosen from d, the released row count, k and the job's mu: see "
        "docs/algorithms.md). The job's `algorithm` says which ran.",
    )
    k: JsonInt = Field(ge=1, le=10_000, description="Number of cluster centres.")
    epsilon: float | None = Field(default=None, gt=0, description="This job's epsilon.")
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="Default: the dataset's delta."
    )
    mu: float | None = Field(default=None, gt=0, description="Or: this job's cost as mu-GDP.")
    params: JobParams | None = None
    summaries: bool = Field(
        default=False,
        description="Also release private cluster `sizes` and a private `loss` (with its "
        "standard error) of the centres, paid out of this job's epsilon/mu "
        "(`privacy.summary_mu`; the centres get the rest).",
    )


class Progress(BaseModel):
    iteration: int
    iterations: int


class Privacy(BaseModel):
    mu: float
    epsilon: float
    delta: float
    sigma: float = Field(description="Std of the Gaussian noise per release (sensitivity 1).")
    iterations: int = Field(description="Number of Gaussian releases.")
    summary_mu: float | None = Field(
        default=None,
        description="With summaries: the part of `mu` spent on them (two more releases); "
        "`sigma` and `iterations` are then the centres'.",
    )


class JobResult(BaseModel):
    centers: list[list[float]] = Field(description="k centres in the original coordinates.")
    columns: list[str]
    sizes: list[int] | None = Field(
        default=None,
        description="With summaries: a noisy count of the rows nearest to each centre "
        "(floored at 0; differentially private, not the exact counts).",
    )
    loss: float | None = Field(
        default=None,
        description="With summaries: the noisy k-means loss of the centres, "
        "the sum over the rows of the squared distance to the nearest centre, divided by "
        "n_rows_dp.",
    )
    loss_se: float | None = Field(
        default=None,
        description="The standard deviation of the loss's noise: B * sigma_loss / n_rows_dp, "
        "where B (between R^2 and (2R)^2) bounds the squared distance from any point of the "
        "declared domain to its nearest centre (docs/algorithms.md).",
    )


class JobOut(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    algorithm: AlgorithmName
    k: int
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: Progress
    privacy: Privacy
    result: JobResult | None = None
    error: str | None = None
    cancel_requested: bool = False
    summaries: bool = False
    sweep_id: uuid.UUID | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def of(cls, job: Job, columns: list[str]) -> JobOut:
        result = None
        if job.status == "succeeded" and job.centers is not None:
            result = JobResult(
                centers=job.centers,
                columns=columns,
                sizes=job.sizes,
                loss=job.loss,
                loss_se=job.loss_se,
            )
        return cls(
            id=job.id,
            dataset_id=job.dataset_id,
            algorithm=job.algorithm,
            k=job.k,
            status=job.status,
            progress=Progress(
                iteration=job.progress_iteration, iterations=job.progress_total or job.iterations
            ),
            privacy=Privacy(
                mu=job.mu,
                epsilon=job.epsilon,
                delta=job.delta,
                sigma=job.sigma,
                iterations=job.releases,
                summary_mu=job.summary_mu,
            ),
            result=result,
            error=job.error,
            cancel_requested=job.cancel_requested,
            summaries=job.summaries,
            sweep_id=job.sweep_id,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )


class Estimate(BaseModel):
    algorithm: AlgorithmName
    privacy: Privacy
    admissible: bool = Field(description="Whether the job would be admitted now.")
    budget: Budget = Field(description="The budget now.")
    budget_after: Budget = Field(description="The budget if the job were admitted now.")


# --- sweeps ------------------------------------------------------------------------------------


class SweepCreate(RequestBody):
    model_config = ConfigDict(json_schema_extra={"example": {"ks": [2, 4, 8, 16], "epsilon": 1.0}})
    ks: list[Annotated[int, Field(ge=1, le=10_000), BeforeValidator(_integral)]] = Field(
        min_length=2,
        max_length=32,
        description="The values of k to try (distinct); one job each, with summaries.",
    )
    algorithm: AlgorithmChoice = Field(default="auto", description="As for a job.")
    epsilon: float | None = Field(
        default=None, gt=0, description="The whole sweep's epsilon (all its jobs together)."
    )
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="Default: the dataset's delta."
    )
    mu: float | None = Field(default=None, gt=0, description="Or: the whole sweep's mu-GDP.")
    params: JobParams | None = None


class SweepPrivacy(BaseModel):
    mu: float = Field(description="The whole sweep's cost (mu-GDP).")
    epsilon: float
    delta: float
    job_mu: float = Field(description="Each job's cost: mu / sqrt(number of ks), rounded down.")


class SweepJobEstimate(BaseModel):
    k: int
    algorithm: AlgorithmName = Field(description="The method the job would run.")
    privacy: Privacy


class SweepEstimate(BaseModel):
    privacy: SweepPrivacy
    jobs: list[SweepJobEstimate] = Field(description="Each job's plan, in increasing k.")
    admissible: bool = Field(description="Whether the whole sweep would be admitted now.")
    budget: Budget = Field(description="The budget now.")
    budget_after: Budget = Field(description="The budget if the sweep were admitted now.")


class SweepPoint(BaseModel):
    k: int
    job_id: uuid.UUID
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    loss: float | None = Field(description="The job's private loss, once it succeeded.")
    loss_se: float | None = Field(description="The standard deviation of the loss's noise.")


class SweepOut(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    algorithm: AlgorithmChoice = Field(description="As requested; each job says which ran.")
    ks: list[int]
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] = Field(
        description="`succeeded` when every job has; `queued` while none has started; "
        "`running` while any job is queued or running; else `failed` if any job failed, "
        "otherwise `cancelled`."
    )
    progress: Progress = Field(description="Iterations done and planned, over all its jobs.")
    privacy: SweepPrivacy
    jobs: list[SweepPoint]
    suggested_k: int | None = Field(
        description="The elbow of the noisy losses (docs/algorithms.md), once every job "
        "succeeded; null before."
    )
    created_at: datetime

    @classmethod
    def of(cls, sweep: Sweep, jobs: list[Job], suggested_k: int | None, status: str) -> SweepOut:
        return cls(
            id=sweep.id,
            dataset_id=sweep.dataset_id,
            algorithm=sweep.algorithm,
            ks=[int(k) for k in sweep.ks],
            status=status,
            progress=Progress(
                iteration=sum(j.progress_iteration for j in jobs),
                iterations=sum(j.progress_total or j.iterations for j in jobs),
            ),
            privacy=SweepPrivacy(
                mu=sweep.mu, epsilon=sweep.epsilon, delta=sweep.delta, job_mu=sweep.job_mu
            ),
            jobs=[
                SweepPoint(
                    k=j.k,
                    job_id=j.id,
                    status=j.status,
                    loss=j.loss if j.status == "succeeded" else None,
                    loss_se=j.loss_se if j.status == "succeeded" else None,
                )
                for j in jobs
            ],
            suggested_k=suggested_k,
            created_at=sweep.created_at,
        )
