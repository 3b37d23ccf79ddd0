"""Sweeps over k: one admission of several summarised jobs sharing a total mu, their combined
state, and the suggested k (privclust.clustering.summaries.suggest_k on the noisy losses)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.jobs import service as jobs_service
from app.kit import repository as kit_repo
from app.kit.errors import BudgetExceeded, Conflict, InvalidParameter, NotFound
from app.ledger import service as ledger
from app.models import Dataset, Job, Sweep
from app.sweeps import repository as repo
from privclust.privacy import budget as bmath
from privclust.privacy import gdp

MAX_KS = 32


@dataclass(frozen=True)
class SweepRequest:
    ks: tuple[int, ...]
    algorithm: str = "auto"
    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = None
    iterations: int | None = None
    variations: int | None = None
    projection_dim: int | None = None

    def fingerprint(self, dataset_id: uuid.UUID) -> str:
        body = {"dataset_id": str(dataset_id), "kind": "sweep", **self.__dict__}
        body["ks"] = list(self.ks)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SweepPlan:
    """The sweep's total cost and each job's plan (mu / sqrt(m) each, summaries included)."""

    mu: float
    epsilon: float
    delta: float
    job_mu: float
    jobs: tuple[jobs_service.JobPlan, ...]


def plan_sweep(dataset: Dataset, req: SweepRequest) -> SweepPlan:
    """Validate a sweep and plan its jobs; 422 `invalid-parameter` naming the field, nothing
    charged. Each job is planned exactly as a job asked for mu = job_mu with summaries, at the
    sweeps' summary share (SWEEP_SUMMARY_FRACTION: the losses are what a sweep is for)."""
    from privclust.clustering.summaries import SWEEP_SUMMARY_FRACTION

    if not 2 <= len(req.ks) <= MAX_KS:
        raise InvalidParameter(f"give 2 to {MAX_KS} values of k", field="ks")
    if len(set(req.ks)) != len(req.ks):
        raise InvalidParameter("the values of k must be distinct", field="ks")
    if (req.epsilon is None) == (req.mu is None):
        raise InvalidParameter("give exactly one of `epsilon` and `mu`", field="epsilon")
    delta = dataset.delta if req.delta is None else req.delta
    try:
        if req.mu is not None:
            total = float(req.mu)
            epsilon = gdp.epsilon_from_mu_delta(total, delta)
        else:
            total = gdp.mu_from_epsilon_delta(req.epsilon, delta)  # type: ignore[arg-type]
            epsilon = float(req.epsilon)  # type: ignore[arg-type]
        job_mu = gdp.equal_share(total, len(req.ks))
    except gdp.PrivacyParameterError as exc:
        raise InvalidParameter(str(exc), field=exc.field or "epsilon") from exc
    plans = []
    for k in sorted(req.ks):
        job = jobs_service.JobRequest(
            algorithm=req.algorithm,
            k=k,
            mu=job_mu,
            delta=delta,
            iterations=req.iterations,
            variations=req.variations,
            projection_dim=req.projection_dim,
            summaries=True,
            summary_fraction=SWEEP_SUMMARY_FRACTION,
        )
        try:
            plans.append(jobs_service.plan_job(dataset, job))
        except InvalidParameter as exc:
            field = "ks" if exc.field == "k" else exc.field
            raise InvalidParameter(f"k={k}: {exc.detail}", field=field) from exc
    return SweepPlan(mu=total, epsilon=epsilon, delta=delta, job_mu=job_mu, jobs=tuple(plans))


@dataclass(frozen=True)
class SweepEstimate:
    plan: SweepPlan
    budget_before: ledger.BudgetView
    budget_after: ledger.BudgetView
    admissible: bool


def estimate(session: Session, dataset: Dataset, req: SweepRequest) -> SweepEstimate:
    """What `submit` would charge and the budget after it; charges nothing. Admissible by the
    same test as `submit`: the whole sweep's mu against what is left."""
    plan = plan_sweep(dataset, req)
    before, after, ok = jobs_service.budget_if_admitted(
        session, dataset, plan.mu, [job.mu for job in plan.jobs]
    )
    return SweepEstimate(plan=plan, budget_before=before, budget_after=after, admissible=ok)


def submit(
    session: Session,
    dataset: Dataset,
    req: SweepRequest,
    *,
    actor: uuid.UUID | None,
    idempotency_key: str | None,
    plan: SweepPlan,
) -> tuple[Sweep, bool]:
    """Admit every job of the sweep, or none: one transaction, one budget check of the whole
    sweep's mu under the dataset's lock, then each job's reservation (as for a single job).
    Any refusal raises before commit, so the caller's rollback leaves nothing charged.

    The caller opens the transaction with `ledger.begin_budget_transaction`, commits, and only
    then enqueues. Idempotency as for jobs (`jobs_service.submit`), with the sweep's own keys.
    """
    fingerprint = req.fingerprint(dataset.id)
    if idempotency_key is not None:
        existing = repo.sweep_by_idempotency_key(session, dataset.tenant, idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint), False
    locked = ledger.lock_for_admission(session, dataset.id)
    if idempotency_key is not None:
        existing = repo.sweep_by_idempotency_key(session, dataset.tenant, idempotency_key)
        if existing is not None:
            return _same_request(existing, fingerprint), False
    state = ledger.state_of(session, dataset.id)
    if not bmath.is_admissible(state.live_mus, plan.mu, state.mu_cap):
        remaining = bmath.remaining_mu(state.live_mus, state.mu_cap)
        raise BudgetExceeded(
            f"this sweep needs mu={plan.mu:.6g} ({len(plan.jobs)} jobs of mu={plan.job_mu:.6g}) "
            f"but only mu={remaining:.6g} of the dataset's budget (mu_cap={state.mu_cap:.6g}) "
            "remains; nothing was charged",
            mu_requested=plan.mu,
            mu_remaining=remaining,
            epsilon_remaining=bmath.epsilon_remaining(remaining, locked.delta),
            mu_cap=state.mu_cap,
        )
    sweep = kit_repo.add(
        session,
        Sweep(
            id=uuid.uuid4(),
            dataset_id=dataset.id,
            tenant=dataset.tenant,
            ks=[p.k for p in plan.jobs],
            algorithm=req.algorithm,
            mu=plan.mu,
            epsilon=plan.epsilon,
            delta=plan.delta,
            job_mu=plan.job_mu,
            idempotency_key=idempotency_key,
            request_fingerprint=fingerprint,
            created_by=actor,
        ),
    )
    for job_plan in plan.jobs:
        job = jobs_service.new_job(dataset, job_plan, actor=actor, sweep_id=sweep.id)
        ledger.reserve(session, dataset.id, job, actor)
    return sweep, True


def recheck_idempotency(session: Session, tenant: str, key: str, fingerprint: str) -> Sweep | None:
    existing = repo.sweep_by_idempotency_key(session, tenant, key)
    return None if existing is None else _same_request(existing, fingerprint)


def _same_request(existing: Sweep, fingerprint: str) -> Sweep:
    if existing.request_fingerprint != fingerprint:
        raise Conflict(
            "this Idempotency-Key was already used with a different request body",
            code="idempotency-key-reused",
            sweep_id=str(existing.id),
        )
    return existing


def get_sweep(session: Session, sweep_id: uuid.UUID, tenant: str) -> Sweep:
    sweep = repo.sweep_for_tenant(session, sweep_id, tenant)
    if sweep is None:
        raise NotFound("no such sweep", code="sweep-not-found")
    return sweep


def status_of(jobs: list[Job]) -> str:
    """The sweep's state from its jobs' (see SweepOut.status)."""
    statuses = {j.status for j in jobs}
    if statuses == {"succeeded"}:
        return "succeeded"
    if statuses == {"queued"}:
        return "queued"
    if statuses & {"queued", "running"}:
        return "running"
    return "failed" if "failed" in statuses else "cancelled"


def suggested_k(jobs: list[Job]) -> int | None:
    """The elbow of the released losses once every job succeeded (post-processing)."""
    from privclust.clustering.summaries import suggest_k

    if not jobs or any(j.status != "succeeded" or j.loss is None for j in jobs):
        return None
    return suggest_k(
        [j.k for j in jobs],
        [float(j.loss) for j in jobs if j.loss is not None],
        [float(j.loss_se) if j.loss_se is not None else 0.0 for j in jobs],
    )


def cancel(session: Session, sweep: Sweep, actor: uuid.UUID | None) -> list[Job]:
    """Cancel every job of the sweep that has not finished (queued: refunded; running:
    stopped, stays charged). 409 when all of them had already finished."""
    jobs = repo.jobs_of_sweep(session, sweep.id)
    live = [j for j in jobs if j.status in ("queued", "running")]
    if not live:
        raise Conflict("every job of the sweep has already finished", code="sweep-finished")
    for job in live:
        try:
            jobs_service.cancel(session, job, actor)
        except Conflict:  # it finished meanwhile
            continue
    return repo.jobs_of_sweep(session, sweep.id)
