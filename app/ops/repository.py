"""Aggregates read by the /metrics scrape (app.ops.state): counts and sums only, never a row's
content, each one query whatever the number of jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.models import Dataset, Job, JobStatus, KeyBudget, LedgerEntry, LedgerKind
from app.models import DatasetBudget as RunningBudget


def job_counts(session: Session) -> Sequence[tuple[str, str, int]]:
    """(status, algorithm, number of jobs) for every pair that has jobs."""
    rows = session.execute(
        select(Job.status, Job.algorithm, func.count()).group_by(Job.status, Job.algorithm)
    ).all()
    return [(status, algorithm, int(n)) for status, algorithm, n in rows]


def failed_entries(session: Session, swept_note: str) -> tuple[int, int]:
    """(`failed` entries in the ledger, those of them whose note is `swept_note`).

    The ledger is append-only: nothing updates or deletes an entry (a dataset's deletion keeps
    its ledger), and every failed job gets exactly one `failed` entry. Counted here, a total
    can only grow, whatever happens to the jobs table."""
    row = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(case((LedgerEntry.note == swept_note, 1), else_=0)), 0),
        ).where(LedgerEntry.kind == LedgerKind.FAILED)
    ).one()
    return int(row[0]), int(row[1])


def _seconds_between(session: Session, start: Any, end: Any) -> Any:
    if session.get_bind().dialect.name == "sqlite":  # timestamps are stored as UTC text
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


def job_run_durations(
    session: Session, bounds: Sequence[float]
) -> Sequence[tuple[str, int, float, list[int]]]:
    """Per algorithm, over jobs that started and finished: (algorithm, number of jobs, total
    seconds, [how many took at most b seconds, for each b in bounds]). One aggregate query."""
    seconds = _seconds_between(session, Job.started_at, Job.finished_at)
    rows = session.execute(
        select(
            Job.algorithm,
            func.count(),
            func.coalesce(func.sum(seconds), 0.0),
            *[func.sum(case((seconds <= b, 1), else_=0)) for b in bounds],
        )
        .where(Job.started_at.is_not(None), Job.finished_at.is_not(None))
        .group_by(Job.algorithm)
    ).all()
    return [(row[0], int(row[1]), float(row[2]), [int(n or 0) for n in row[3:]]) for row in rows]


def oldest_jobs(session: Session) -> tuple[datetime | None, datetime | None]:
    """(when the longest-running job started, when the longest-waiting queued job was
    admitted); None where no job is in that status."""
    running, queued = session.execute(
        select(
            func.min(case((Job.status == JobStatus.RUNNING, Job.started_at))),
            func.min(case((Job.status == JobStatus.QUEUED, Job.created_at))),
        ).where(Job.status.in_((JobStatus.RUNNING, JobStatus.QUEUED)))
    ).one()
    return running, queued


def queued_by_tenant(session: Session) -> list[tuple[str, int, datetime]]:
    """(tenant, jobs admitted and not yet started, when the oldest of them was admitted) for
    every tenant with a queued job."""
    rows = session.execute(
        select(Job.tenant, func.count(), func.min(Job.created_at))
        .where(Job.status == JobStatus.QUEUED)
        .group_by(Job.tenant)
    ).all()
    return [(str(tenant), int(n), oldest) for tenant, n, oldest in rows]


def dataset_counts(session: Session) -> tuple[int, int]:
    """(datasets whose rows are stored, datasets deleted)."""
    rows = session.execute(
        select(Dataset.deleted_at.is_(None), func.count()).group_by(Dataset.deleted_at.is_(None))
    ).all()
    counts = {bool(active): int(n) for active, n in rows}
    return counts.get(True, 0), counts.get(False, 0)


@dataclass(frozen=True)
class DatasetBudget:
    """One dataset's budget (its running budget: what its ledger replays to, app.ledger.state),
    in squares of mu: GDP costs compose as the root of the sum of squares."""

    tenant: str
    stored: bool  # its rows are still there (not deleted): it can run jobs
    mu_cap: float
    spent_sq: float  # the row count's release and every job that started
    reserved_sq: float  # admitted jobs that have neither started nor been refunded


def dataset_budgets(session: Session) -> list[DatasetBudget]:
    """Every dataset's cap, spent and reserved mu (squared): one row per dataset from the
    running budgets, whatever the length of the ledgers."""
    rows = session.execute(
        select(
            Dataset.tenant,
            Dataset.deleted_at.is_(None),
            RunningBudget.mu_cap,
            RunningBudget.spent_sq,
            RunningBudget.reserved_sq,
        ).join(RunningBudget, RunningBudget.dataset_id == Dataset.id)
    ).all()
    return [
        DatasetBudget(str(t), bool(stored), float(cap), float(Fraction(s)), float(Fraction(r)))
        for t, stored, cap, s, r in rows
    ]


def key_budgets_left(session: Session) -> list[tuple[str, str, float]]:
    """(tenant, key id, mu left) for every key cap: sqrt(cap^2 - spent^2 - reserved^2) of the
    key's running budget on one dataset, floored at 0."""
    rows = session.execute(
        select(Dataset.tenant, KeyBudget.key_id, KeyBudget.mu_cap, KeyBudget.spent_sq,
               KeyBudget.reserved_sq).join(Dataset, Dataset.id == KeyBudget.dataset_id)
    ).all()  # fmt: skip
    return [
        (str(t), str(k), max(0.0, float(cap) ** 2 - float(Fraction(s) + Fraction(r))) ** 0.5)
        for t, k, cap, s, r in rows
    ]
