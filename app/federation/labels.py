"""A member's federated jobs as its dataset's owner sees them, and its own rows' labels.

A coordinator sends the centres it released (public: the numbers every analyst of the
coordinator reads) with the end of a job that succeeded; the member stores them on its member
job. Its dataset's owner lists the member jobs on the dataset (public metadata only: never a
statistic, a noise share or a count of its rows) and labels its own rows by the nearest of
those centres, here on the member: the rows never leave it, and the labels go to no one else.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.jobs.labels import LabelSource, rows_with_centres
from app.kit.errors import Conflict, InvalidParameter, NotFound
from app.ledger import service as ledger
from app.models import ApiKey, Dataset, JobStatus, MemberJob, Role


def checked_centres(
    session: Session, job: MemberJob, succeeded: bool, centers: list[list[float]] | None
) -> list[list[float]] | None:
    """The centres a job's end sent, checked: only with success, k rows of d finite numbers
    (d the member dataset's columns, k the plan's when it names one); else 422."""
    if centers is None:
        return None
    if not succeeded:
        raise InvalidParameter("only a job that succeeded has centres", field="centers")
    dataset = session.get(Dataset, job.dataset_id)
    assert dataset is not None  # a member job's dataset is kept (deleting drops its rows only)
    k = job.plan.get("k")
    if isinstance(k, int) and len(centers) != k:
        raise InvalidParameter(f"the job released {k} centres", field="centers")
    if not centers or any(len(row) != dataset.n_cols for row in centers):
        raise InvalidParameter(
            f"the centres are rows of {dataset.n_cols} numbers, the dataset's columns",
            field="centers",
        )
    if not all(math.isfinite(v) for row in centers for v in row):
        raise InvalidParameter("the centres are finite numbers", field="centers")
    return [[float(v) for v in row] for row in centers]


def keep_centres(job: MemberJob, centers: list[list[float]] | None) -> None:
    """Store the released centres on a job that ended succeeded and holds none yet: a job that
    ended otherwise (failed, cancelled, ended by the member's own sweeper) never takes them."""
    if centers is not None and job.status == JobStatus.SUCCEEDED and job.centers is None:
        job.centers = centers


def owned_dataset(session: Session, key: ApiKey, dataset_id: uuid.UUID) -> Dataset:
    """The dataset, for its owner only: any other key (an analyst, another tenant) 404."""
    if key.role != Role.OWNER:
        raise NotFound("no such dataset", code="dataset-not-found")
    return ledger.tenant_dataset(session, dataset_id, key.tenant)


def member_jobs(session: Session, key: ApiKey, dataset_id: uuid.UUID) -> Sequence[MemberJob]:
    """The federated jobs the dataset's member keys joined, newest first."""
    dataset = owned_dataset(session, key, dataset_id)
    return session.scalars(
        select(MemberJob)
        .where(MemberJob.dataset_id == dataset.id)
        .order_by(MemberJob.created_at.desc(), MemberJob.id)
    ).all()


def member_job_labels(
    session: Session, key: ApiKey, dataset_id: uuid.UUID, member_job_id: uuid.UUID
) -> LabelSource:
    """The dataset's rows with the centres its member job received: 409 `job-not-succeeded`
    when it holds none, 410 when the rows were deleted."""
    dataset = owned_dataset(session, key, dataset_id)
    job = session.get(MemberJob, member_job_id)
    if job is None or job.dataset_id != dataset.id:
        raise NotFound("no such federated job on this dataset", code="member-job-not-found")
    if job.status != JobStatus.SUCCEEDED or job.centers is None:
        raise Conflict(
            f"labels exist only for a job that succeeded with centres; this one is {job.status}",
            code="job-not-succeeded",
        )
    return rows_with_centres(dataset, job.centers)
