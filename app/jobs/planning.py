"""What a job will cost, fixed before it is admitted and checked again when it runs.

The clustering library's own planner decides T, L, sigma and the releases from public inputs
only (the dataset's planning row count, d, k and the request), so what is charged at admission
is exactly what the worker runs. Nothing here writes to the database.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from app.coordinator.terms import check_federated_plan, is_federated
from app.datasets import service as datasets_service
from app.datasets.domain import accuracy_space
from app.datasets.table_terms import protects
from app.kit.errors import DatasetNotReady, InvalidParameter
from app.kit.method_choice import library_keywords
from app.kit.query import body_digest
from app.models import Dataset, Job
from privclust.clustering import (
    Algorithm,
    ClusteringInputError,
    ClusteringResult,
    RunPlan,
    plan_run,
)
from privclust.clustering.mechanisms.lloyd import DEFAULT_LLOYD_STEPS
from privclust.clustering.outputs.accuracy import Accuracy, expected_accuracy, smallest_epsilon
from privclust.clustering.run.options import BudgetChoiceError
from privclust.privacy import gdp
from privclust.tabular import TableSpec

MAX_K = 10_000


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What a job or a sweep asks of each of its runs: the method, the budget (exactly one of
    epsilon and mu; delta defaults to the dataset's) and the method's parameters."""

    algorithm: str = Algorithm.AUTO.value
    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = None
    iterations: int | None = None
    variations: int | None = None
    projection_dim: int | None = None

    def body(self, dataset_id: uuid.UUID) -> dict[str, Any]:
        """The request as the body its Idempotency-Key fingerprint digests."""
        return {"dataset_id": str(dataset_id), **self.__dict__}


@dataclass(frozen=True, kw_only=True)
class JobRequest(RunRequest):
    k: int = 2
    summaries: bool = False
    # The summaries' share of mu (None: SUMMARY_MU_FRACTION); sweeps set their own.
    summary_fraction: float | None = None

    def fingerprint(self, dataset_id: uuid.UUID) -> str:
        body = self.body(dataset_id)
        if not self.summaries:  # fingerprints of requests made before summaries existed hold
            del body["summaries"]
        if self.summary_fraction is None:
            del body["summary_fraction"]
        return body_digest(body)


@dataclass(frozen=True)
class JobPlan:
    """Everything about a job's privacy that is fixed before it is admitted: the library's plan
    of it (`run`, the one owner of its method, budget, releases and noise), and what only the
    service adds: the delta and epsilon its ledger records, the parameters its row keeps, and
    what its mu protects. Every figure of the run is read from `run`, never from a copy."""

    run: RunPlan
    # The delta the job is recorded at (the request's, else the dataset's) and its epsilon there
    # (`RunPlan.epsilon_at`: the one given, or the smallest the plan's mu implies).
    delta: float
    epsilon: float
    params: dict[str, Any]
    # An estimate's (`with_estimate_facts`; an admission has no use for them): what the job's
    # releases let one expect of its centres (and summaries), from public facts, and what its
    # mu protects, in words (app.datasets.table_terms.protects).
    accuracy: Accuracy | None = None
    protects: str = ""

    # Its privacy block and its cost (`release_cost`) read the run's figures at the recorded
    # epsilon and delta.
    @property
    def mu(self) -> float:
        return self.run.mu

    @property
    def sigma(self) -> float:
        return self.run.sigma

    @property
    def releases(self) -> int:
        return self.run.releases

    @property
    def summary_mu(self) -> float | None:
        """The part of `mu` spent on the private summaries (None: none); `sigma` and
        `releases` are then the centres'."""
        return self.run.summary_mu


def privacy_error(exc: gdp.PrivacyParameterError) -> InvalidParameter:
    """The 422 of a privacy parameter the GDP arithmetic refused, naming its field."""
    return InvalidParameter(str(exc), field=exc.field or "epsilon")


def budget_choice_error(exc: BudgetChoiceError) -> InvalidParameter:
    """The 422 of a budget not given exactly one way (the library's one check, made when it
    resolves the budget). A request's `delta` defaults to its dataset's and also prices a job
    given as mu, so only epsilon and mu are the client's choice: the delta goes along with an
    epsilon alone."""
    del exc
    return InvalidParameter("give exactly one of `epsilon` and `mu`", field="epsilon")


# Library argument names -> the request fields a client sent.
_FIELDS = {
    "iterations": "params.iterations",
    "variations": "params.variations",
    "projection_dim": "params.projection_dim",
}

# The methods each PE-only parameter means nothing to (refused rather than ignored).
_NO_PROJECTION = (
    Algorithm.PE_MEANS,
    Algorithm.FASTLLOYD,
    Algorithm.LSH_CORESET,
    Algorithm.PE_LLOYD,
)
_NO_VARIATIONS = (Algorithm.FASTLLOYD, Algorithm.LSH_CORESET)


def plan_job(dataset: Dataset, req: JobRequest) -> JobPlan:
    """Validate a request against a dataset and fix its mu, sigma and number of releases.

    The row count is N~ (or N when the owner declared it public): never the exact N of a
    dataset under add/remove neighbours.
    Raises InvalidParameter (422 `invalid-parameter`) naming the field; charges nothing.
    """
    if req.k > MAX_K:
        raise InvalidParameter(f"k must be at most {MAX_K}", field="k")
    count = datasets_service.planning_count(dataset)
    _check_request(dataset, req, count.n_rows)
    delta = dataset.delta if req.delta is None else req.delta
    try:
        run = _plan_run(dataset, req, count, delta)
        epsilon = run.epsilon_at(delta)
    except BudgetChoiceError as exc:
        raise budget_choice_error(exc) from exc
    except gdp.PrivacyParameterError as exc:
        raise privacy_error(exc) from exc
    except ClusteringInputError as exc:
        field = exc.field
        if field == "mu" and req.epsilon is not None:  # the budget the client gave
            field = "epsilon"
        raise InvalidParameter(str(exc), field=_FIELDS.get(field, field)) from exc
    if is_federated(dataset):
        check_federated_plan(run.algorithm, run.projection_dim is not None, req.summaries)
    return _job_plan(req, run, epsilon, delta)


def with_estimate_facts(dataset: Dataset, plan: JobPlan) -> JobPlan:
    """`plan` with what only an estimate shows: the accuracy its releases let one expect on the
    dataset's declared domain (privclust.clustering.outputs.accuracy.expected_accuracy), and
    what its mu protects (one row, or one unit's rows)."""
    return replace(
        plan,
        accuracy=expected_accuracy(plan.run, accuracy_space(dataset)),
        protects=protects(TableSpec.of(dataset.table_spec)),
    )


def _plan_run(
    dataset: Dataset, req: JobRequest, count: datasets_service.PlanningCount, delta: float
) -> RunPlan:
    """The library's plan of a request on a dataset (its public row count and relation)."""
    return plan_run(
        count.n_rows,
        dataset.n_cols,
        req.k,
        relation=count.relation,
        contribution_bound=count.contribution_bound,
        **library_keywords(req, delta),
        summaries=req.summaries,
        summary_fraction=req.summary_fraction,
    )


def plan_for_target(dataset: Dataset, req: JobRequest, target: float) -> JobPlan:
    """The plan of the smallest epsilon (at the request's delta) whose expected accuracy meets
    `target`, the largest centre_std_fraction allowed (privclust.clustering.outputs.accuracy); 422
    naming `target_centre_std_fraction` when no epsilon does. `req` gives neither epsilon nor
    mu."""
    if req.epsilon is not None or req.mu is not None:
        raise InvalidParameter(
            "give target_centre_std_fraction instead of epsilon or mu, not with them",
            field="target_centre_std_fraction",
        )
    plan_job(dataset, replace(req, epsilon=1.0))  # every other field's errors, named as usual
    count = datasets_service.planning_count(dataset)
    delta = dataset.delta if req.delta is None else req.delta

    def plan_at(epsilon: float) -> RunPlan:
        return _plan_run(dataset, replace(req, epsilon=epsilon), count, delta)

    try:
        epsilon, _ = smallest_epsilon(target, plan_at, accuracy_space(dataset))
    except ClusteringInputError as exc:
        raise InvalidParameter(str(exc), field="target_centre_std_fraction") from exc
    except gdp.PrivacyParameterError as exc:
        raise privacy_error(exc) from exc
    return plan_job(dataset, replace(req, epsilon=epsilon))


def _check_request(dataset: Dataset, req: JobRequest, n_rows: int) -> None:
    """The request's own rules, checked before the library plans it (422 naming the field)."""
    if req.k > n_rows:
        name = "n_rows" if dataset.count_public else "n_rows_dp, the released row count"
        raise InvalidParameter(
            f"k must be at most the dataset's {name} ({n_rows}), got {req.k}", field="k"
        )
    if req.algorithm in _NO_PROJECTION and req.projection_dim is not None:
        raise InvalidParameter(
            "params.projection_dim applies to hdpe-means only", field="params.projection_dim"
        )
    if req.algorithm in _NO_VARIATIONS and req.variations is not None:
        raise InvalidParameter(
            "params.variations applies to pe-means and hdpe-means only",
            field="params.variations",
        )


def _job_plan(req: JobRequest, run: RunPlan, epsilon: float, delta: float) -> JobPlan:
    # The parameters a job row keeps: what the client chose, so that the worker re-plans and
    # runs exactly this (`run_options`).
    params = {
        name: value
        for name, value in (
            ("iterations", req.iterations),
            ("variations", req.variations),
            ("projection_dim", run.projection_dim),
            ("summary_fraction", req.summary_fraction if req.summaries else None),
            ("lloyd_steps", _lloyd_steps(run)),
            ("second_start", run.second_start or None),
        )
        if value is not None
    }
    return JobPlan(run=run, delta=delta, epsilon=epsilon, params=params)


def _lloyd_steps(run: RunPlan) -> int | None:
    """The Lloyd steps a pe-lloyd plan in the full space takes (they depend on its T), kept
    with the job so that a later change of the default cannot re-plan it differently: the
    steps the library planned (`RunPlan.lloyd_steps`)."""
    if run.algorithm != Algorithm.PE_LLOYD or run.projection_dim is not None:
        return None
    return run.lloyd_steps


def run_options(job: Job) -> dict[str, Any]:
    """The library arguments a job row fixes, as `plan_run` and `cluster` take them. A
    pe-lloyd job in the full space admitted before its Lloyd steps were kept took one, and one
    admitted before its second start (privclust.clustering.mechanisms.candidates) none."""
    params = job.params
    steps = {}
    if job.algorithm == Algorithm.PE_LLOYD and "projection_dim" not in params:
        steps["lloyd_steps"] = int(params.get("lloyd_steps", DEFAULT_LLOYD_STEPS))
        steps["second_start"] = int(params.get("second_start", 0))
    return {
        **steps,
        "algorithm": job.algorithm,
        "mu": job.mu,
        "iterations": job.iterations,
        "variations": params.get("variations"),
        **({"projection_dim": params["projection_dim"]} if "projection_dim" in params else {}),
        "summaries": job.summaries,
        "summary_fraction": params.get("summary_fraction"),
    }


def replanned(job: Job, count: datasets_service.PlanningCount, n_cols: int) -> RunPlan:
    """The library's plan of a job row (`run_options`) on its dataset's public count and d."""
    return plan_run(
        count.n_rows,
        n_cols,
        job.k,
        relation=count.relation,
        contribution_bound=count.contribution_bound,
        **run_options(job),
    )


def still_as_charged(job: Job, count: datasets_service.PlanningCount, n_cols: int) -> bool:
    """Re-plan a queued job from public inputs: whether its run is still what was charged.

    It may differ after an upgrade changed a default between admission and run; such a job is
    refused (and refunded: no noise yet) rather than run at a cost nobody was charged.
    """
    try:
        plan = replanned(job, count, n_cols)
    except ValueError:
        return False
    return (
        plan.releases == job.releases
        and plan.sigma >= job.sigma
        and plan.summary_mu == job.summary_mu
    )


def plan_mismatch(job: Job, dataset: Dataset) -> str | None:
    """The job's plan made again from its row and the dataset's public count, for the ledger's
    audit (`privclust ledger verify`): None when it is what the row charged, exactly, else what
    differs (a row whose mu was changed plans another sigma)."""
    try:
        plan = replanned(job, datasets_service.planning_count(dataset), dataset.n_cols)
    except (ValueError, DatasetNotReady) as exc:
        return f"it cannot be planned: {exc}"
    differs = [
        f"{name} {getattr(plan, name)!r} planned, {getattr(job, name)!r} charged"
        for name in ("releases", "sigma", "summary_mu")
        if getattr(plan, name) != getattr(job, name)
    ]
    return "; ".join(differs) or None


def check_ran_as_charged(
    job: Job, count: datasets_service.PlanningCount, result: ClusteringResult
) -> None:
    """Raise if the noise actually used is less than what was charged for, or if the run did
    not plan with the dataset's public count and relation (it must not release a count of its
    own)."""
    if (
        result.releases != job.releases
        or result.sigma < job.sigma
        or (result.n_public, result.relation, result.count_mu)
        != (count.n_rows, count.relation, None)
        or result.summary_mu != job.summary_mu
    ):
        raise RuntimeError(
            f"privacy plan mismatch: planned {job.releases} releases at sigma={job.sigma} with "
            f"{count}, ran {result.releases} at sigma={result.sigma} with "
            f"n_public={result.n_public}, relation={result.relation}, "
            f"count_mu={result.count_mu}"
        )
