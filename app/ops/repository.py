"""Aggregates read by the /metrics scrape (app.ops.metrics): counts only, never a row's content."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.models import Dataset, Job, JobStatus


def job_counts(session: Session) -> Sequence[tuple[str, str, int]]:
    """(status, algorithm, number of jobs) for every pair that has jobs."""
    rows = session.execute(
        select(Job.status, Job.algorithm, func.count()).group_by(Job.status, Job.algorithm)
    ).all()
    return [(status, algorithm, int(n)) for status, algorithm, n in rows]


def count_failed_jobs_with_error(session: Session, error: str) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.status == JobStatus.FAILED, Job.error == error)
        )
        or 0
    )


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


def dataset_counts(session: Session) -> tuple[int, int]:
    """(datasets whose rows are stored, datasets deleted)."""
    rows = session.execute(
        select(Dataset.deleted_at.is_(None), func.count()).group_by(Dataset.deleted_at.is_(None))
    ).all()
    counts = {bool(active): int(n) for active, n in rows}
    return counts.get(True, 0), counts.get(False, 0)
