"""Sweeps' queries (a sweep with its jobs)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.kit.query import ListQuery
from app.kit.repository import list_page
from app.models import Job, Sweep


def sweep_for_tenant(session: Session, sweep_id: uuid.UUID, tenant: str) -> Sweep | None:
    return session.scalar(select(Sweep).where(Sweep.id == sweep_id, Sweep.tenant == tenant))


def sweep_by_idempotency_key(session: Session, tenant: str, key: str) -> Sweep | None:
    return session.scalar(select(Sweep).where(Sweep.tenant == tenant, Sweep.idempotency_key == key))


def jobs_of_sweep(session: Session, sweep_id: uuid.UUID) -> list[Job]:
    """A sweep's jobs in increasing k."""
    return list(session.scalars(select(Job).where(Job.sweep_id == sweep_id).order_by(Job.k)))


def list_sweeps(
    session: Session, query: ListQuery
) -> tuple[list[tuple[Sweep, list[Job]]], str | None]:
    """A page of the tenant's sweeps (newest first), each with its jobs in increasing k, and
    the next cursor: two queries whatever the page size."""
    sweeps, nxt = list_page(session, Sweep, query)
    jobs: dict[uuid.UUID, list[Job]] = {s.id: [] for s in sweeps}
    if sweeps:
        for job in session.scalars(select(Job).where(Job.sweep_id.in_(list(jobs))).order_by(Job.k)):
            assert job.sweep_id is not None
            jobs[job.sweep_id].append(job)
    return [(s, jobs[s.id]) for s in sweeps], nxt
