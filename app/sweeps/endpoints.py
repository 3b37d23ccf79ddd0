"""Sweeps over k: one atomic admission of a summarised job per k, their losses and a suggested k."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from app.jobs import service as jobs_service
from app.jobs.endpoints import ADMITS, SubmissionDep, budget_verdict, run_fields
from app.jobs.schemas import Accuracy, FigureWarning, Privacy
from app.keys.auth import TenantKey
from app.kit.deps import (
    ClockDep,
    PageCursor,
    PageLimit,
    SessionDep,
    SettingsDep,
    UnitOfWorkRoute,
)
from app.kit.problems import responses
from app.kit.query import ListQuery
from app.kit.schemas import Page
from app.sweeps import service as sweeps_service
from app.sweeps.schemas import SweepCreate, SweepEstimate, SweepJobEstimate, SweepOut, SweepPrivacy

router = APIRouter(prefix="/v1", tags=["sweeps"], route_class=UnitOfWorkRoute)


def _request_of(body: SweepCreate) -> sweeps_service.SweepRequest:
    return sweeps_service.SweepRequest(ks=tuple(body.ks), **run_fields(body))


def _out(state: sweeps_service.SweepState) -> SweepOut:
    return SweepOut.of(
        state.sweep,
        state.jobs,
        state.suggested_k,
        state.status,
        [FigureWarning.of(w) for w in state.warnings],
        state.loss_space,
    )


@router.post(
    "/datasets/{dataset_id}/sweeps",
    response_model=SweepOut,
    summary="Run one summarised job per k, admitted and charged atomically as one",
    **ADMITS,
)
def sweeps_create(
    dataset_id: uuid.UUID,
    body: SweepCreate,
    session: SessionDep,
    settings: SettingsDep,
    key: TenantKey,
    submission: SubmissionDep,
) -> SweepOut:
    """The whole sweep's epsilon (or mu) is split equally between its jobs (each mu/sqrt(m));
    all of them are admitted, or none (409 `budget-exceeded`, `key-budget-exceeded` or
    `pace-exceeded`, nothing charged)."""
    state, created = sweeps_service.create_sweep(
        session, settings, dataset_id, _request_of(body), submission.by(key)
    )
    submission.answered(created)
    return _out(state)


@router.post(
    "/datasets/{dataset_id}/sweeps/estimate",
    response_model=SweepEstimate,
    responses=responses(401, 403, 404, 409, 422),
    summary="What a sweep would cost, each job's plan and the budget after it; charges nothing",
)
def sweeps_estimate(
    dataset_id: uuid.UUID, body: SweepCreate, session: SessionDep, key: TenantKey, clock: ClockDep
) -> SweepEstimate:
    asker = jobs_service.Asker(key.id, clock)
    est = sweeps_service.estimate(session, dataset_id, key.tenant, _request_of(body), asker)
    plan = est.plan
    return SweepEstimate(
        privacy=SweepPrivacy.of(plan),
        jobs=[
            SweepJobEstimate(
                k=j.run.k,
                algorithm=j.run.algorithm,
                privacy=Privacy.of(j),
                accuracy=Accuracy.of(j.accuracy, est.loss_space),
            )
            for j in plan.jobs
            if j.accuracy is not None
        ],
        **budget_verdict(est),
    )


@router.get("/sweeps", response_model=Page[SweepOut], responses=responses(401, 403, 422))
def sweeps_list(
    session: SessionDep,
    key: TenantKey,
    dataset_id: uuid.UUID | None = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> Page[SweepOut]:
    """The tenant's sweeps, newest first, optionally of one dataset."""
    query = ListQuery(key.tenant, limit, cursor, dataset_id)
    items, nxt = sweeps_service.list_sweeps(session, query)
    return Page[SweepOut](items=[_out(state) for state in items], next_cursor=nxt)


@router.get("/sweeps/{sweep_id}", response_model=SweepOut, responses=responses(401, 403, 404))
def sweeps_get(sweep_id: uuid.UUID, session: SessionDep, key: TenantKey) -> SweepOut:
    """Each k's private loss and its standard error, the progress over all jobs, and the
    suggested k once every job succeeded."""
    sweep = sweeps_service.get_sweep(session, sweep_id, key.tenant)
    return _out(sweeps_service.state_of(session, sweep))


@router.post(
    "/sweeps/{sweep_id}/cancel", response_model=SweepOut, responses=responses(401, 403, 404, 409)
)
def sweeps_cancel(sweep_id: uuid.UUID, session: SessionDep, key: TenantKey) -> SweepOut:
    """Cancel every unfinished job: queued ones are refunded, running ones stop and stay
    charged."""
    return _out(sweeps_service.cancel(session, sweep_id, key.tenant, key.id))
