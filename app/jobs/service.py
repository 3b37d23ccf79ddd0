"""Clustering jobs: validation, privacy planning, admission through the ledger, state changes."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.datasets import service as datasets_service
from app.jobs import repository as repo
from app.kit import repository as kit_repo
from app.kit.errors import Conflict, InvalidParameter
from app.ledger import service as ledger
from app.models import Dataset, Job
from privclust.privacy import budget as bmath
from privclust.privacy import gdp

MAX_K = 10_000


@dataclass(frozen=True)
class JobRequest:
    algorithm: str = "auto"
    k: int = 2
    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = None
    iterations: int | None = None
    variations: int | None = None
    projection_dim: int | None = None
    summaries: bool = False
    # The summaries' share of mu (None: SUMMARY_MU_FRACTION); sweeps set their own.
    summary_fraction: float | None = None

    def fingerprint(self, dataset_id: uuid.UUID) -> str:
        body = {"dataset_id": str(dataset_id), **self.__dict__}
        if not self.summaries:  # fingerprints of requests made before summaries existed hold
            del body["summaries"]
        if self.summary_fraction is None:
            del body["summary_fraction"]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class JobPlan:
    """Everything about a job's privacy that is fixed before it is admitted."""

    algorithm: str
    k: int
    mu: float
    epsilon: float
    delta: float
    sigma: float
    releases: int
    iterations: int
    progress_total: int
    params: dict[str, Any]
    # The part of `mu` spent on the private summaries (None: no summaries); `sigma` and
    # `releases` are then the centres'.
    summary_mu: float | None = None


def _privacy_error(exc: gdp.PrivacyParameterError) -> InvalidParameter:
    return InvalidParameter(str(exc), field=exc.field or "epsilon")


# Library argument names -> the request fields a client sent.
_FIELDS = {
    "iterations": "params.iterations",
    "variations": "params.variations",
    "projection_dim": "params.projection_dim",
}


def plan_job(dataset: Dataset, req: JobRequest) -> JobPlan:
    """Validate a request against a dataset and fix its mu, sigma and number of releases.

    The clustering library's own planner decides T, L and the releases from public inputs
    (the dataset's planning row count, d, k and the request), so what is charged is exactly
    what the worker will run. The row count is N~ (or N when the owner declared it public):
    never the exact N of a dataset under add/remove neighbours.
    Raises InvalidParameter (422 `invalid-parameter`) naming the field; charges nothing.
    """
    from privclust.clustering import ClusteringInputError, plan_run

    if req.k > MAX_K:
        raise InvalidParameter(f"k must be at most {MAX_K}", field="k")
    count = datasets_service.planning_count(dataset)
    if req.k > count.n_rows:
        name = "n_rows" if dataset.count_public else "n_rows_dp, the released row count"
        raise InvalidParameter(
            f"k must be at most the dataset's {name} ({count.n_rows}), got {req.k}", field="k"
        )
    if (req.epsilon is None) == (req.mu is None):
        raise InvalidParameter("give exactly one of `epsilon` and `mu`", field="epsilon")
    delta = dataset.delta if req.delta is None else req.delta
    if (
        req.algorithm in ("pe-means", "fastlloyd", "lsh-coreset", "pe-lloyd")
        and req.projection_dim is not None
    ):
        raise InvalidParameter(
            "params.projection_dim applies to hdpe-means only", field="params.projection_dim"
        )
    if req.algorithm in ("fastlloyd", "lsh-coreset") and req.variations is not None:
        raise InvalidParameter(
            "params.variations applies to pe-means and hdpe-means only",
            field="params.variations",
        )
    try:
        run = plan_run(
            count.n_rows,
            dataset.n_cols,
            req.k,
            relation=count.relation,
            algorithm=req.algorithm,
            epsilon=req.epsilon,
            delta=delta if req.epsilon is not None else None,
            mu=req.mu,
            iterations=req.iterations,
            variations=req.variations,
            projection_dim=req.projection_dim,
            summaries=req.summaries,
            summary_fraction=req.summary_fraction,
        )
        epsilon = (
            req.epsilon if req.epsilon is not None else gdp.epsilon_from_mu_delta(run.mu, delta)
        )
    except gdp.PrivacyParameterError as exc:
        raise _privacy_error(exc) from exc
    except ClusteringInputError as exc:
        raise InvalidParameter(str(exc), field=_FIELDS.get(exc.field, exc.field)) from exc
    params = {
        name: value
        for name, value in (
            ("iterations", req.iterations),
            ("variations", req.variations),
            ("projection_dim", run.projection_dim),
            ("summary_fraction", req.summary_fraction if req.summaries else None),
        )
        if value is not None
    }
    return JobPlan(
        algorithm=run.algorithm,
        k=run.k,
        mu=run.mu,
        epsilon=epsilon,
        delta=delta,
        sigma=run.sigma,
        releases=run.releases,
        iterations=run.iterations,
        progress_total=run.progress_total,
        params=params,
        summary_mu=run.summary_mu,
    )


@dataclass(frozen=True)
class Estimate:
    plan: JobPlan
    budget_before: ledger.BudgetView
    budget_after: ledger.BudgetView
    admissible: bool


def budget_if_admitted(
    session: Session, dataset: Dataset, total_mu: float, job_mus: Sequence[float]
) -> tuple[ledger.BudgetView, ledger.BudgetView, bool]:
    """(the budget now, the budget after admitting jobs of `job_mus`, whether they would be
    admitted now): the admission test is `submit`'s, on `total_mu` (the jobs' composed mu)."""
    state = ledger.state_of(session, dataset.id)
    ok = bmath.is_admissible(state.live_mus, total_mu, state.mu_cap)
    after_state = state.copy()
    if ok:
        for mu in job_mus:
            after_state.reserved[uuid.uuid4()] = mu
            after_state.jobs += 1
    return ledger.view(dataset, state), ledger.view(dataset, after_state), ok


def estimate(session: Session, dataset: Dataset, req: JobRequest) -> Estimate:
    plan = plan_job(dataset, req)
    before, after, ok = budget_if_admitted(session, dataset, plan.mu, [plan.mu])
    return Estimate(plan=plan, budget_before=before, budget_after=after, admissible=ok)


def submit(
    session: Session,
    dataset: Dataset,
    req: JobRequest,
    *,
    actor: uuid.UUID | None,
    idempotency_key: str | None,
    plan: JobPlan | None = None,
) -> tuple[Job, bool]:
    """Admit a job (reserve its budget) in the current transaction. Returns (job, created).

    `plan` is `plan_job(dataset, req)` when the caller already computed it.

    The caller must start this transaction with `ledger.begin_budget_transaction`, commit,
    and only then enqueue. With an Idempotency-Key already used
    for the same body, the original job comes back and nothing is charged again.

    The key is looked up twice: once without the lock (the cheap path of a plain retry), and
    again under the dataset's budget lock, because a request with the same key may have
    committed while this one waited for that lock; without the second look it would be
    refused as over budget instead of replaying that job. Same key on two datasets at once:
    the unique constraint refuses the second insert (IntegrityError); the caller rolls back
    and calls `recheck_idempotency`.
    """
    plan = plan or plan_job(dataset, req)
    fingerprint = req.fingerprint(dataset.id)
    if idempotency_key is not None:
        if not (1 <= len(idempotency_key) <= 200):
            raise InvalidParameter(
                "Idempotency-Key must be 1 to 200 characters", field="Idempotency-Key"
            )
        existing = repo.job_by_idempotency_key(session, dataset.tenant, idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint), False
    ledger.lock_for_admission(session, dataset.id)
    if idempotency_key is not None:
        existing = repo.job_by_idempotency_key(session, dataset.tenant, idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint), False
    job = new_job(
        dataset, plan, actor=actor, idempotency_key=idempotency_key, fingerprint=fingerprint
    )
    ledger.reserve(session, dataset.id, job, actor)
    return job, True


def new_job(
    dataset: Dataset,
    plan: JobPlan,
    *,
    actor: uuid.UUID | None,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
    sweep_id: uuid.UUID | None = None,
) -> Job:
    """The queued Job row of an admitted plan (not yet added to the session)."""
    return Job(
        id=uuid.uuid4(),
        dataset_id=dataset.id,
        tenant=dataset.tenant,
        algorithm=plan.algorithm,
        k=plan.k,
        params=plan.params,
        mu=plan.mu,
        epsilon=plan.epsilon,
        delta=plan.delta,
        sigma=plan.sigma,
        releases=plan.releases,
        iterations=plan.iterations,
        status="queued",
        progress_iteration=0,
        progress_total=plan.progress_total,
        idempotency_key=idempotency_key,
        request_fingerprint=fingerprint,
        created_by=actor,
        summaries=plan.summary_mu is not None,
        summary_mu=plan.summary_mu,
        sweep_id=sweep_id,
    )


def recheck_idempotency(session: Session, tenant: str, key: str, fingerprint: str) -> Job | None:
    existing = repo.job_by_idempotency_key(session, tenant, key)
    return None if existing is None else _same_request(existing, fingerprint)


def _same_request(existing: Job, fingerprint: str) -> Job:
    if existing.request_fingerprint != fingerprint:
        raise Conflict(
            "this Idempotency-Key was already used with a different request body",
            code="idempotency-key-reused",
            job_id=str(existing.id),
        )
    return existing


def cancel(session: Session, job: Job, actor: uuid.UUID | None) -> Job:
    """Queued: cancelled and refunded. Running: asked to stop; stays charged."""
    if repo.transition_job(
        session, job.id, from_status="queued", status="cancelled", finished_at=kit_repo.now()
    ):
        ledger.refund(session, job, note="cancelled before it started", actor=actor)
        ledger.record(session, job, "cancelled", actor=actor)
    elif job.status == "running":
        repo.update_running_job(session, job.id, cancel_requested=True)
    elif job.status in ("succeeded", "failed", "cancelled"):
        raise Conflict(f"the job has already {job.status}", code="job-finished")
    session.refresh(job)
    return job


def fail_unqueued(session: Session, job_id: uuid.UUID, reason: str) -> bool:
    """The job was admitted but could not be enqueued: fail it and refund (no noise drawn).

    Only a job still queued is failed; one a worker has already taken (the enqueue reached
    Redis after all, and its reply was lost) keeps running and stays charged. Returns whether
    the job was failed and refunded."""
    job = session.get(Job, job_id)
    if job is None:
        return False
    if repo.transition_job(
        session,
        job_id,
        from_status="queued",
        status="failed",
        error=reason,
        finished_at=kit_repo.now(),
    ):
        ledger.refund(session, job, note=reason)
        ledger.record(session, job, "failed", note=reason)
        return True
    return False


LOST_WORKER = (
    "the worker running this job stopped (crashed, was killed or timed out); the "
    "privacy budget it spent stays charged and the job is never re-run"
)


def sweep_stale_jobs(session: Session, stale_seconds: float) -> list[uuid.UUID]:
    """Fail running jobs whose worker stopped sending heartbeats. Their budget stays spent."""
    from datetime import timedelta

    cutoff = kit_repo.now() - timedelta(seconds=stale_seconds)
    failed = []
    for job in repo.stale_running_jobs(session, cutoff):
        if repo.transition_job(
            session,
            job.id,
            from_status="running",
            status="failed",
            error=LOST_WORKER,
            finished_at=kit_repo.now(),
        ):
            ledger.record(session, job, "failed", note=LOST_WORKER)
            failed.append(job.id)
    return failed
