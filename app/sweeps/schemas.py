"""Sweeps' request and response models: the ks, the split cost, each k's private loss."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.jobs.schemas import (
    LOSS_SPACE,
    Accuracy,
    AlgorithmChoice,
    AlgorithmName,
    FigureWarning,
    JobParams,
    LossSpace,
    Privacy,
    Progress,
    StatusName,
)
from app.kit.schemas import RequestBody, from_attributes, integral
from app.ledger.schemas import Budget, KeyPricing
from app.models import Job, JobStatus, Sweep
from privclust.clustering import Algorithm

if TYPE_CHECKING:
    from app.sweeps.service import SweepPlan


class SweepCreate(RequestBody):
    model_config = ConfigDict(json_schema_extra={"example": {"ks": [2, 4, 8, 16], "epsilon": 1.0}})
    ks: list[Annotated[int, Field(ge=1, le=10_000), BeforeValidator(integral)]] = Field(
        min_length=2,
        max_length=32,
        description="The values of k to try (distinct); one job each, with summaries.",
    )
    algorithm: AlgorithmChoice = Field(default=Algorithm.AUTO.value, description="As for a job.")
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

    @classmethod
    def of(cls, source: Sweep | SweepPlan) -> SweepPrivacy:
        """A sweep's cost, from its row or from its plan (an estimate's)."""
        return from_attributes(cls, source)


class SweepJobEstimate(BaseModel):
    k: int
    algorithm: AlgorithmName = Field(description="The method the job would run.")
    privacy: Privacy
    accuracy: Accuracy = Field(description="What to expect of this job's centres and loss.")


class SweepEstimate(KeyPricing):
    privacy: SweepPrivacy
    jobs: list[SweepJobEstimate] = Field(description="Each job's plan, in increasing k.")
    admissible: bool = Field(description="Whether the whole sweep would be admitted now.")
    budget: Budget = Field(description="The budget now.")
    budget_after: Budget = Field(description="The budget if the sweep were admitted now.")


class SweepPoint(BaseModel):
    k: int
    job_id: uuid.UUID
    status: StatusName
    loss: float | None = Field(description="The job's private loss, once it succeeded.")
    loss_se: float | None = Field(description="The standard deviation of the loss's noise.")


class SweepOut(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    algorithm: AlgorithmChoice = Field(description="As requested; each job says which ran.")
    ks: list[int]
    status: StatusName = Field(
        description="`succeeded` when every job has; `queued` while none has started; "
        "`running` while any job is queued or running; else `failed` if any job failed, "
        "otherwise `cancelled`."
    )
    progress: Progress = Field(description="Iterations done and planned, over all its jobs.")
    privacy: SweepPrivacy
    jobs: list[SweepPoint]
    suggested_k: int | None = Field(
        description="The elbow of the noisy losses (docs/algorithms.md), once every job "
        "succeeded; null before, and null when the noisy losses cannot tell the ks apart "
        "(`warnings` then has `sweep-inconclusive`), rise with k (`sweep-loss-rises`) or "
        "leave the elbow to their noise (`sweep-elbow-unclear`). It "
        "depends on the budget: another budget may suggest another k (`suggested-k-budget`)."
    )
    warnings: list[FigureWarning] = Field(
        default_factory=list,
        description="Once every job succeeded: `sweep-inconclusive`, `sweep-loss-rises` or "
        "`sweep-elbow-unclear` (no k suggested, and why), or `suggested-k-budget` (and "
        "`suggested-k-largest` when it is the largest k).",
    )
    loss_space: LossSpace = Field(default="original", description=LOSS_SPACE)
    created_at: datetime

    @classmethod
    def of(
        cls,
        sweep: Sweep,
        jobs: list[Job],
        suggested_k: int | None,
        status: str,
        warnings: list[FigureWarning] | None = None,
        loss_space: str = "original",
    ) -> SweepOut:
        progress = Progress(
            iteration=sum(j.progress_iteration for j in jobs),
            iterations=sum(j.progress_total or j.iterations for j in jobs),
        )
        points = [
            SweepPoint(
                k=j.k,
                job_id=j.id,
                status=j.status,
                loss=j.loss if j.status == JobStatus.SUCCEEDED else None,
                loss_se=j.loss_se if j.status == JobStatus.SUCCEEDED else None,
            )
            for j in jobs
        ]
        return from_attributes(
            cls,
            sweep,
            ks=[int(k) for k in sweep.ks],
            status=status,
            progress=progress,
            privacy=SweepPrivacy.of(sweep),
            jobs=points,
            suggested_k=suggested_k,
            warnings=warnings or [],
            loss_space=loss_space,
        )
