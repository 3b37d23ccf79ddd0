"""A job's life after admission: start, progress and heartbeats, finish, fail, cancel, sweep.

Every state change is a compare-and-set on the job's status (repository.transition_job) with
its ledger entry in the same transaction, so two actors (the worker, a cancel, the sweeper)
never both move a job. Privacy-critical: a refund only while the job is still queued (no noise
can have been drawn); once the worker has committed the charge with queued -> running, the
budget stays spent whatever happens next.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.coordinator.service import FederatedJob
from app.coordinator.terms import is_federated, job_calls
from app.datasets import service as datasets_service
from app.datasets.domain import run_domain
from app.jobs import planning
from app.jobs import repository as repo
from app.jobs.members import tell_members_failed
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.db.session import session_factory, unit_of_work
from app.kit.errors import Conflict
from app.ledger import service as ledger
from app.models import FINISHED, Dataset, Job, JobStatus, LedgerKind
from privclust.clustering import ClusteringResult

LOST_WORKER = (
    "the worker running this job stopped (crashed, was killed or timed out); the "
    "privacy budget it spent stays charged and the job is never re-run"
)
PLAN_CHANGED = (
    "the job's privacy plan no longer matches what was charged; it was not run and was refunded"
)
RUNNER_DIED = (
    "the process running this job stopped (it crashed, or was killed, e.g. for using too much "
    "memory); the privacy budget it spent stays charged and the job is never re-run"
)
RUNNER_DIED_BEFORE_START = (
    "the process that was to run this job stopped before the job started; it was not run and "
    "its budget was refunded"
)
TIMED_OUT = (
    "the job ran longer than the worker's time limit and was stopped; the privacy budget it "
    "spent stays charged and the job is never re-run"
)


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
        from_status=JobStatus.QUEUED,
        status=JobStatus.FAILED,
        error=reason,
        finished_at=kit_repo.now(),
    ):
        ledger.refund(session, job, note=reason)
        ledger.record(session, job, LedgerKind.FAILED, note=reason)
        return True
    return False


def cancel(session: Session, job: Job, actor: uuid.UUID | None) -> Job:
    """Queued: cancelled and refunded. Running: asked to stop; stays charged."""
    if repo.transition_job(
        session,
        job.id,
        from_status=JobStatus.QUEUED,
        status=JobStatus.CANCELLED,
        finished_at=kit_repo.now(),
    ):
        ledger.refund(session, job, note="cancelled before it started", actor=actor)
        ledger.record(session, job, LedgerKind.CANCELLED, actor=actor)
    elif job.status == JobStatus.RUNNING:
        repo.update_running_job(session, job.id, cancel_requested=True)
    elif job.status in FINISHED:
        raise Conflict(f"the job has already {job.status}", code="job-finished")
    session.refresh(job)
    return job


def sweep_stale_jobs(session: Session, stale_seconds: float) -> list[uuid.UUID]:
    """Fail running jobs whose worker stopped sending heartbeats. Their budget stays spent.
    A federated dataset's members are told each job failed (`tell_members_failed`: each
    refunds if it answered no release).

    Each job's failure is committed on its own: a transaction holds one job's row and then its
    dataset's budget lock (for the `failed` entry), the order every writer takes them in, and
    never waits for a second job's row while holding a budget lock."""
    cutoff = kit_repo.now() - timedelta(seconds=stale_seconds)
    failed = []
    for job in repo.stale_running_jobs(session, cutoff):
        if repo.transition_job(
            session,
            job.id,
            from_status=JobStatus.RUNNING,
            status=JobStatus.FAILED,
            error=LOST_WORKER,
            finished_at=kit_repo.now(),
        ):
            ledger.record(session, job, LedgerKind.FAILED, note=LOST_WORKER)
            failed.append(job)
        session.commit()
    for job in failed:
        tell_members_failed(session, job, "failed (its worker stopped)")
    return [job.id for job in failed]


def queued_before(sessions: sessionmaker[Session], cutoff: datetime) -> list[tuple[uuid.UUID, str]]:
    """(id, tenant) of the jobs still queued that were admitted before `cutoff`, oldest first."""
    with unit_of_work(sessions) as session:
        return [(job.id, job.tenant) for job in repo.queued_jobs_created_before(session, cutoff)]


def still_queued(session: Session, job_id: uuid.UUID) -> bool:
    """Whether the job is queued as the database has it now (not as a session last saw it)."""
    return repo.job_status(session, job_id) == JobStatus.QUEUED


def _job_status(session: Session, name: str) -> str | None:
    """The status of the job whose id is `name` (None: no job here has that id)."""
    try:
        job_id = uuid.UUID(name)
    except ValueError:
        return None
    return repo.job_status(session, job_id)


@dataclass(frozen=True)
class QueuedJob:
    """What a worker needs to know of a queued job's dataset, read in one short transaction."""

    storage_path: str | None
    center: list[float]
    radius: float
    # The domain keywords of the library's run (a ball, or a box: app.datasets.domain).
    domain: dict[str, Any]
    # Every use of the row count reads this (N~, or N only when declared public): never the
    # number of rows in the stored matrix.
    count: datasets_service.PlanningCount
    # A federated dataset's job: its calls to the members (made with the worker's settings).
    calls: Callable[[Settings], FederatedJob] | None = None
    n_cols: int = 0
    # The method admitted (what the Dask cluster's partitions are planned for: app.kit.cluster).
    algorithm: str = ""


class JobRun:
    """One worker's run of one job; each step is a short transaction of its own, so that no
    database connection is held while the job computes."""

    def __init__(self, db_url: str, job_id: uuid.UUID) -> None:
        self.sessions = session_factory(db_url)
        self.job_id = job_id

    def load(self) -> QueuedJob | str:
        """The job's inputs if it is queued; else its status ("missing" when there is none)."""
        with unit_of_work(self.sessions) as s:
            job = s.get(Job, self.job_id)
            if job is None or job.status != JobStatus.QUEUED:
                return job.status if job is not None else "missing"
            dataset = s.get(Dataset, job.dataset_id)
            assert dataset is not None
            return QueuedJob(
                storage_path=dataset.storage_path,
                center=list(dataset.center),
                radius=dataset.radius,
                domain=run_domain(dataset),
                count=datasets_service.planning_count(dataset),
                calls=job_calls(s, dataset, str(job.id), job.algorithm, job.mu)
                if is_federated(dataset)
                else None,
                n_cols=dataset.n_cols,
                algorithm=job.algorithm,
            )

    def refund(self, reason: str) -> None:
        """Fail the job before it started, refunded: nothing noisy can have been produced."""
        with unit_of_work(self.sessions) as s:
            fail_unqueued(s, self.job_id, reason)

    def start(self, queued: QueuedJob, n_cols: int) -> Job | str:
        """Move the job queued -> running and commit its charge; the job to run, or the status
        the task ends with ("failed": refused and refunded; "skipped": someone else moved it).

        Privacy-critical: the ledger `commit` entry and the queued -> running transition are
        committed in one transaction BEFORE any noise is drawn, and the transition is a
        compare-and-set, so a job can draw noise at most once: a retried or duplicated RQ job
        finds it no longer queued.
        """
        with unit_of_work(self.sessions) as s:
            job = s.get(Job, self.job_id)
            assert job is not None
            if not planning.still_as_charged(job, queued.count, n_cols):
                fail_unqueued(s, self.job_id, PLAN_CHANGED)
                return JobStatus.FAILED
        # A transaction of its own that begins with the write: on SQLite a read transaction
        # upgraded to a write fails once another writer has committed meanwhile.
        with unit_of_work(self.sessions) as s:
            now = kit_repo.now()
            if not repo.transition_job(
                s,
                self.job_id,
                from_status=JobStatus.QUEUED,
                status=JobStatus.RUNNING,
                started_at=now,
                heartbeat_at=now,
            ):
                return "skipped"
            job = s.get(Job, self.job_id)
            assert job is not None
            ledger.commit(s, job)
            return job

    def heartbeat(self) -> bool:
        """Record that the job's worker lives; False once the job must stop (it is no longer
        running, e.g. swept, or its cancellation was asked for)."""
        with unit_of_work(self.sessions) as s:
            alive = repo.update_running_job(s, self.job_id, heartbeat_at=kit_repo.now())
            job = s.get(Job, self.job_id)
            return alive and not (job is not None and job.cancel_requested)

    def progress(self, iteration: int, total: int) -> None:
        with unit_of_work(self.sessions) as s:
            repo.update_running_job(
                s,
                self.job_id,
                progress_iteration=iteration,
                progress_total=total,
                heartbeat_at=kit_repo.now(),
            )

    def lost(self, running_reason: str = RUNNER_DIED) -> str:
        """The process running the job died or was stopped: the job ends failed, refunded if it
        had not started (no noise can exist), else charged with `running_reason`. Both are
        compare-and-sets, so a job that ended meanwhile keeps its end. A federated dataset's
        members are told a failed job ended. Returns its status."""
        with unit_of_work(self.sessions) as s:
            refunded = fail_unqueued(s, self.job_id, RUNNER_DIED_BEFORE_START)
        if not refunded:
            self._end(JobStatus.FAILED, note=running_reason, error=running_reason)
        with unit_of_work(self.sessions) as s:
            job = s.get(Job, self.job_id)
            if job is not None and job.status == JobStatus.FAILED:
                tell_members_failed(s, job, "failed (its process stopped)")
            return repo.job_status(s, self.job_id) or "missing"

    def runs_to_keep(self, owners: Collection[str]) -> set[str]:
        """Of the owners of runs cached on a cluster, those whose rows may still be needed:
        every running job's id, and every name that is not a job of this database."""
        with unit_of_work(self.sessions) as s:
            return {o for o in owners if _job_status(s, o) in (None, JobStatus.RUNNING)}

    def record_members(self, states: list[dict[str, Any]]) -> None:
        """A federated job's members' states as they change (`FederatedJob.observer`)."""
        with unit_of_work(self.sessions) as s:
            repo.set_member_states(s, self.job_id, states)

    def stopped(self) -> None:
        """The job stopped on request while running: cancelled, and it stays charged."""
        self._end(JobStatus.CANCELLED, note="stopped while running; stays charged")

    def fail(self, message: str) -> None:
        """The run failed after its charge was committed: the budget stays spent."""
        self._end(JobStatus.FAILED, note=message, error=message)

    def finish(self, job: Job, result: ClusteringResult) -> str:
        """Store the released centres (and summaries): "succeeded", or "discarded" when the
        job was swept or stopped meanwhile (its result is then never released)."""
        released: dict[str, Any] = {
            "centers": [[float(v) for v in row] for row in result.centers],
            "last_move": result.last_move,
            "last_shift": result.last_shift,
        }
        if result.sizes is not None:  # the noisy releases only: nothing exact is stored
            released |= {
                "sizes": [int(v) for v in result.sizes],
                "loss": result.loss,
                "loss_se": result.loss_se,
            }
        total = job.progress_total
        done = self._end(
            JobStatus.SUCCEEDED, progress_iteration=total, progress_total=total, **released
        )
        return JobStatus.SUCCEEDED if done else "discarded"

    def released_centers(self) -> list[list[float]] | None:
        """The centres the job released, as stored (None unless it succeeded)."""
        with unit_of_work(self.sessions) as s:
            job = s.get(Job, self.job_id)
            if job is None or job.status != JobStatus.SUCCEEDED:
                return None
            return job.centers

    def _end(self, status: JobStatus, note: str | None = None, **values: Any) -> bool:
        """running -> `status` with its audit entry; False if the job was no longer running."""
        with unit_of_work(self.sessions) as s:
            if not repo.update_running_job(
                s, self.job_id, status=status, finished_at=kit_repo.now(), **values
            ):
                return False
            job = s.get(Job, self.job_id)
            assert job is not None
            ledger.record(s, job, LedgerKind(status.value), note=note)
            return True
