"""Jobs' request and response models: the request, its privacy cost, progress and result."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from typing_extensions import TypeAliasType

from app.jobs.results import (
    ResultContext,
    result_accuracy,
    result_category_shares,
    result_warnings,
    sizes_se,
)
from app.kit.schemas import JsonInt, ParamInt, RequestBody, coarse_time, from_attributes
from app.ledger.schemas import Budget, KeyPricing
from app.models import Job, JobStatus, Role
from privclust.clustering import Algorithm
from privclust.clustering.auto import describe_auto
from privclust.clustering.outputs.accuracy import Accuracy as AccuracyFigures
from privclust.clustering.outputs.uncertainty import Caveat


def _never_auto(name: str) -> str:
    """What ran is a method, never the rule that picks one."""
    if name == Algorithm.AUTO:
        raise ValueError("a job runs a method, never `auto`")
    return name


if TYPE_CHECKING:
    from app.jobs.planning import JobPlan

    AlgorithmName = str
    AlgorithmChoice = str
    StatusName = str
else:
    # Derived from the enums: Literals of their values. Every `algorithm` field's schema is the
    # one named `Algorithm` (a component of the API document), so a generated client has one
    # enum type; a job's own `algorithm` is never `auto` (checked, not shown in the schema).
    _Algorithm = TypeAliasType(
        "Algorithm",
        Annotated[
            Literal[tuple(a.value for a in Algorithm)],
            Field(
                description="A clustering method (docs/algorithms.md), or `auto`, which a job "
                "or a sweep may request: the method is then chosen from public facts, and the "
                "job's `algorithm` names it (a job's `algorithm` is never `auto`)."
            ),
        ],
    )
    AlgorithmName = Annotated[_Algorithm, AfterValidator(_never_auto)]
    AlgorithmChoice = _Algorithm
    StatusName = Literal[tuple(status.value for status in JobStatus)]


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
        json_schema_extra={"example": {"algorithm": Algorithm.AUTO.value, "k": 4, "epsilon": 1.0}}
    )
    algorithm: AlgorithmChoice = Field(
        default=Algorithm.AUTO.value,
        description="PE-means, HDPE-means (high dimensions), FastLloyd (noisy Lloyd steps), "
        "lsh-coreset (a private LSH-tree coreset), pe-lloyd (PE-means, then a noisy Lloyd "
        f"step), or auto: {describe_auto()} (docs/algorithms.md). The job's `algorithm` says "
        "which ran.",
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


class JobEstimateRequest(JobCreate):
    """A job's estimate request: a job's body, or the same with a target accuracy instead of
    epsilon/mu."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "algorithm": Algorithm.AUTO.value,
                "k": 3,
                "target_centre_std_fraction": 0.01,
            }
        }
    )
    target_centre_std_fraction: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Instead of `epsilon`/`mu`: the largest expected centre error allowed, as a "
        "fraction of each column's declared range (`accuracy.centre_std_fraction`); the "
        "estimate answers with the smallest epsilon (at the request's delta) that meets it, "
        "its mu, and whether it is `admissible`.",
    )


class FigureWarning(BaseModel):
    """A note that a released figure is not informative, or that a run may not have settled
    (docs/algorithms.md, "Warnings" and "Warnings that a run may differ")."""

    code: Literal[
        "loss-not-informative",
        "size-below-noise",
        "domain-loose",
        "not-converged",
        "centres-overlap",
        "sweep-inconclusive",
        "sweep-loss-rises",
        "sweep-elbow-unclear",
        "suggested-k-largest",
        "suggested-k-budget",
    ] = Field(description="A stable machine-readable name.")
    detail: str = Field(description="What it means, in a sentence.")

    @classmethod
    def of(cls, caveat: Caveat) -> FigureWarning:
        return cls(code=caveat.code, detail=caveat.detail)


LossSpace = Literal["original", "scaled"]
LOSS_SPACE = (
    "Where the loss is measured: `original` (the columns' own units: a ball dataset) or "
    "`scaled` (each column mapped onto [0, 1] by its declared bounds: a box dataset), so a "
    "loss of 0.01 there is an RMS distance of 0.1 of the columns' ranges."
)


class Accuracy(BaseModel):
    """What the job's releases let one expect, from public facts only (docs/algorithms.md,
    "Expected accuracy")."""

    centre_error: list[float] = Field(
        description="Per column, in its own units: a band that should contain, about 9 times in "
        "10, the distance from a released centre to where a non-private k-means puts it: the "
        "noise and the error the method leaves (a segmentation that differs near the clusters' "
        "borders). Before a run from public facts (the spread of k clusters filling the "
        "declared domain); in a result from its released loss when it has one "
        '(docs/algorithms.md, "Centre error").'
    )
    centre_error_fraction: list[float] = Field(
        description="The same, as a fraction of each column's declared range (a box's "
        "upper - lower; a ball's diameter 2R)."
    )
    spread_from: Literal["domain", "loss"] = Field(
        description="Where `centre_error` read the clusters' spread: `domain` (public facts "
        "only: k clusters filling the declared domain) or `loss` (the released loss)."
    )
    centre_std: list[float] = Field(
        description="Per column, in its own units: the standard deviation of the noise alone "
        "on a released centre of a cluster of n_rows_dp / k rows (not the method's error: see "
        "`centre_error`)."
    )
    centre_std_fraction: list[float] = Field(
        description="The noise's standard deviation as a fraction of each column's declared "
        "range (a box's upper - lower; a ball's diameter 2R)."
    )
    loss_se: float | None = Field(
        description="With summaries: the expected standard error of the private loss (taking "
        "its clip at R^2; the released centres fix it between R^2 and 4R^2)."
    )
    sizes_se: float | None = Field(
        description="With summaries: the standard deviation of the noise on each size."
    )
    loss_space: LossSpace = Field(description=LOSS_SPACE)
    basis: Literal["final-mean-release", "calibrated"] = Field(
        description="`final-mean-release`: read from the noise of the method's last release of "
        "each centre; `calibrated`: a method without one, scaled by a factor measured on "
        "synthetic tables (docs/algorithms.md)."
    )

    @classmethod
    def of(cls, accuracy: AccuracyFigures, loss_space: str) -> Accuracy:
        return from_attributes(
            cls,
            accuracy,
            centre_error=list(accuracy.centre_error),
            centre_error_fraction=list(accuracy.centre_error_fraction),
            centre_std=list(accuracy.centre_std),
            centre_std_fraction=list(accuracy.centre_std_fraction),
            loss_space=loss_space,
        )


class Progress(BaseModel):
    iteration: int
    iterations: int


class Privacy(BaseModel):
    mu: float
    epsilon: float
    delta: float
    sigma: float = Field(
        description="The noise multiplier, a pure number: each release's Gaussian noise has "
        "a standard deviation of sigma times that release's sensitivity, in the release's own "
        "units (rows for a vote histogram or a count; the step radius, or the domain's radius "
        "R, in the space the job clusters in for a sum). How far that moves a centre, in each "
        "column's units, is `accuracy.centre_std`."
    )
    iterations: int = Field(description="Number of Gaussian releases.")
    summary_mu: float | None = Field(
        default=None,
        description="With summaries: the part of `mu` spent on them (two more releases); "
        "`sigma` and `iterations` are then the centres'.",
    )

    @classmethod
    def of(cls, source: Job | JobPlan) -> Privacy:
        """A job's privacy block, from its row or from its plan (an estimate's)."""
        return from_attributes(cls, source, iterations=source.releases)


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
    sizes_se: float | None = Field(
        default=None,
        description="With summaries: the standard deviation of the noise on each size.",
    )
    loss_space: LossSpace = Field(default="original", description=LOSS_SPACE)
    accuracy: Accuracy | None = Field(
        default=None,
        description="What the released values say of the centres' accuracy: `centre_error` "
        "from the released loss when there is one, else as the estimate's (post-processing).",
    )
    category_shares: list[dict[str, dict[str, float]]] | None = Field(
        default=None,
        description="With categorical columns: per centre, `{column: {category: share}}`, the "
        "centre's one-hot coordinates clipped to [0, 1] and renormalised (post-processing of "
        "the released centre).",
    )
    warnings: list[FigureWarning] = Field(
        default_factory=list,
        description="Where a noisy figure is not informative: `loss-not-informative`, "
        "`size-below-noise`, `domain-loose`.",
    )


class MemberState(BaseModel):
    """One member's part in a federated dataset's job, from public facts only (never a
    statistic, a noise share or a count of its rows)."""

    position: int = Field(description="The member's place in the federation's public order.")
    status: Literal["pending", "joined", "answered", "finished", "refused", "failed"] = Field(
        description="pending (not asked yet), joined (it charged the job on its own ledger), "
        "answered (it answered `releases` releases), finished (told the job's end), refused "
        "(it refused to join: nothing charged), failed (a call to it failed mid-job)."
    )
    releases: int = Field(description="The releases it answered in this job.")


class JobOut(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    algorithm: AlgorithmName
    k: int
    status: StatusName
    progress: Progress
    privacy: Privacy
    result: JobResult | None = None
    error: str | None = None
    cancel_requested: bool = False
    summaries: bool = False
    sweep_id: uuid.UUID | None = None
    members: list[MemberState] | None = Field(
        default=None,
        description="A federated dataset's job: each member's part as the coordinator saw it "
        "(public facts only); null for a dataset of this server's own rows.",
    )
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def of(cls, job: Job, context: ResultContext, role: str) -> JobOut:
        """The job as `role` may see it: its start and end to the minute for analysts."""
        result = None
        if job.status == JobStatus.SUCCEEDED and job.centers is not None:
            figures = result_accuracy(job, context)
            result = from_attributes(
                JobResult,
                job,
                columns=context.columns,
                sizes_se=sizes_se(job, context.relation),
                loss_space=context.loss_space,
                accuracy=None if figures is None else Accuracy.of(figures, context.loss_space),
                category_shares=result_category_shares(job, context),
                warnings=[FigureWarning.of(w) for w in result_warnings(job, context)],
            )
        progress = Progress(
            iteration=job.progress_iteration, iterations=job.progress_total or job.iterations
        )
        exact = role == Role.OWNER
        return from_attributes(
            cls,
            job,
            progress=progress,
            privacy=Privacy.of(job),
            result=result,
            members=job.member_states,
            started_at=coarse_time(job.started_at, exact=exact),
            finished_at=coarse_time(job.finished_at, exact=exact),
        )


class Duration(BaseModel):
    """How long the job will run once a worker starts it (not its wait in the queue), from
    public facts only: the method, k, d, the public row count, the plan's iterations and the
    engine, with costs calibrated on the serving machine (docs/api.md, "How long a job
    takes")."""

    seconds: float = Field(description="The expected run time, in seconds.")
    low: float = Field(description="The run time's range: its low end, in seconds.")
    high: float = Field(description="The range's high end, in seconds.")
    engine: Literal["local", "dask"] = Field(
        description="Where the job's passes run: `local` (the worker's job process) or "
        "`dask` (the operator's Dask cluster; a wider range)."
    )


class Estimate(KeyPricing):
    algorithm: AlgorithmName
    privacy: Privacy
    accuracy: Accuracy = Field(description="What to expect of the job's centres and summaries.")
    duration: Duration = Field(description="How long the job will run.")
    protects: str = Field(
        description="What the job's mu protects, in words: one row (not one person) unless the "
        "dataset declared a privacy unit, else all the rows of one unit."
    )
    admissible: bool = Field(description="Whether the job would be admitted now.")
    budget: Budget = Field(description="The budget now.")
    budget_after: Budget = Field(description="The budget if the job were admitted now.")


class CentreRow(BaseModel):
    """One released centre as a flat row: `centre` (its index), then one number per dataset
    column, named as the column (in its units; a column named `centre`, `size` or `size_se` is
    suffixed `_value`), then with summaries `size` and `size_se`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "additionalProperties": {"type": "number"},
            "example": {"centre": 0, "x": 1.5, "y": -0.25, "size": 1210, "size_se": 7.1},
        },
    )
    centre: int
    size: int | None = Field(default=None, description="With summaries: the noisy size.")
    size_se: float | None = Field(
        default=None, description="With summaries: the standard deviation of the size's noise."
    )
