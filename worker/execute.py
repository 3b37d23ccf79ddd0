"""A job run in this process: load its inputs, start it (the charge), cluster, record the end.

Privacy-critical order: the ledger `commit` entry and the queued -> running transition are
committed in one transaction BEFORE any noise is drawn, and the transition is a compare-and-set,
so a job can draw noise at most once: a retried or duplicated RQ job finds it no longer queued
(app.jobs.lifecycle.JobRun.start). Every state change goes through the jobs service.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import sys
import threading
import time
import uuid
from typing import Any

import numpy as np
import numpy.typing as npt
from rq import get_current_job

from app.coordinator.client import MemberError
from app.coordinator.rows import FederatedTable
from app.datasets import storage
from app.jobs import service as jobs_service
from app.kit.cluster import ClusterUnreachable, close_engine, fit_to_workers, row_engine
from app.kit.cluster_watch import ClusterStalled, RunInterrupted
from app.kit.config import Settings, get_settings
from app.kit.errors import StorageUnavailable
from app.models import Job, JobStatus
from privclust.clustering import ClusteringResult, cluster
from privclust.clustering.data.rows import Engine, InProcess, PartitionedTable, Table

log = logging.getLogger("privclust.worker")


class JobStopped(Exception):
    """Raised from the progress callback to stop a running job (cancelled or swept)."""


def _die_with_parent() -> None:
    """If the worker process is killed, its work horse (this process) must not run on."""
    if get_current_job() is not None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - non-glibc systems
            pass


class _Heartbeat(threading.Thread):
    """Records that this job's worker lives, and notices cancellation or sweeping."""

    def __init__(self, run: jobs_service.JobRun, every: float, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{run.job_id}")
        self.job_run, self.every = run, every
        self.stop_requested = stop  # also polled by the engine's waits on the cluster
        self.finished = threading.Event()

    def run(self) -> None:
        while not self.finished.wait(self.every):
            try:
                if not self.job_run.heartbeat():
                    self.stop_requested.set()
            except Exception:  # the database may blip; the sweeper tolerates a few misses
                log.exception("heartbeat failed for job %s", self.job_run.job_id)


def _progress_writer(run: jobs_service.JobRun, heartbeat: _Heartbeat) -> Any:
    last = 0.0

    def progress(iteration: int, total: int) -> None:
        nonlocal last
        if heartbeat.stop_requested.is_set():
            raise JobStopped()
        now = time.monotonic()
        if now - last >= 1.0 or iteration >= total:
            last = now
            run.progress(iteration, total)

    return progress


def run_job_here(job_id: str) -> str:
    """Run the job in this process: load, open its rows and its engine, start (the charge),
    cluster, finish."""
    _die_with_parent()
    settings = get_settings()
    run = jobs_service.JobRun(settings.resolved_database_url, uuid.UUID(job_id))
    queued = run.load()
    if isinstance(queued, str):  # no longer queued (or missing): nothing to do
        return queued
    stop = threading.Event()
    if queued.calls is not None:
        return _run_federated(run, queued, settings, stop)
    opened = _open_rows(run, queued, settings, stop)
    if opened is None:
        return JobStatus.FAILED
    rows, engine = opened
    try:
        # Re-plans from public inputs (refunded if the run would differ from what was
        # charged), then commits the charge with queued -> running.
        job = run.start(queued, n_cols=int(rows.shape[1]))
        if isinstance(job, str):
            return job
        return _cluster(run, job, queued, rows, _Heartbeat(run, settings.heartbeat_seconds, stop))
    finally:
        close_engine(engine)


def _run_federated(
    run: jobs_service.JobRun,
    queued: jobs_service.QueuedJob,
    settings: Settings,
    stop: threading.Event,
) -> str:
    """A federated dataset's job: its members (joined at admission: joining again gives their
    jobs back) answer every release; they are told the job's end, with the released centres
    when it succeeded."""
    assert queued.calls is not None
    calls = queued.calls(settings)
    calls.observer = run.record_members
    try:
        try:
            calls.join()
        except MemberError as exc:
            run.refund(f"{exc.member.name} could not take part in the job; nothing was charged")
            return JobStatus.FAILED
        job = run.start(queued, n_cols=queued.n_cols)
        if isinstance(job, str):
            calls.finish(succeeded=False)
            return job
        table = FederatedTable(calls, queued.count.n_rows, queued.n_cols)
        status = _cluster(
            run, job, queued, table, _Heartbeat(run, settings.heartbeat_seconds, stop)
        )
        if status == JobStatus.SUCCEEDED:  # the released centres: public, as analysts see them
            calls.finish(succeeded=True, centers=run.released_centers())
        else:
            calls.finish(succeeded=False)
        return status
    finally:
        calls.close()


def _open_rows(
    run: jobs_service.JobRun,
    queued: jobs_service.QueuedJob,
    settings: Settings,
    stop: threading.Event,
) -> tuple[npt.NDArray[np.float64] | Table, Engine] | None:
    """The job's rows (a local memory map, or the stored partitions for the engine to read)
    and the engine that passes over them; None, the job refunded, if either cannot be had.
    Both happen before the charge, so nothing noisy can have been produced yet."""
    try:
        engine = row_engine(settings, str(run.job_id), stop.is_set, run.runs_to_keep)
    except ClusterUnreachable as exc:
        _refund_unreachable(run, f"the Dask cluster that runs jobs {exc.reason}", exc)
        return None
    stored = queued.storage_path
    try:
        # Every object the run will read is looked at now: a store that is down fails the job
        # here, refunded, and not in its first pass, after the charge.
        with storage.reaching(stored or "", "opening a job's rows", answered_missing=True):
            if isinstance(engine, InProcess) and not (stored and storage.is_remote(stored)):
                return storage.open_rows(stored), engine  # one memory map, as ever
            partitions = storage.row_partitions(stored, settings.partition_rows)
            storage.check_readable(partitions)
        n_cols = partitions[0].n_cols
        planned = fit_to_workers(engine, partitions, n_cols, queued.algorithm)
        return PartitionedTable(planned, n_cols, engine), engine
    except StorageUnavailable as exc:
        close_engine(engine)
        _refund_unreachable(run, "the datasets' object storage could not be reached", exc)
        return None
    except (OSError, ValueError, IndexError) as exc:
        # The error (it names the server's storage path) goes to the operator's log, not into
        # the job that analysts read.
        log.warning("job %s: the dataset's rows could not be read: %s", run.job_id, exc)
        close_engine(engine)
        run.refund("the dataset's rows could not be read (see the worker's log)")
        return None


def _refund_unreachable(run: jobs_service.JobRun, what: str, exc: Exception) -> None:
    """A service the job needs could not be reached before its charge: failed and refunded
    (nothing noisy can exist), the details in the operator's log only."""
    log.warning("job %s: %s", run.job_id, exc)
    run.refund(f"{what}; nothing was charged (the worker's log has the details)")


def _cluster(
    run: jobs_service.JobRun,
    job: Job,
    queued: jobs_service.QueuedJob,
    rows: npt.NDArray[np.float64] | Table,
    heartbeat: _Heartbeat,
) -> str:
    """Run the charged job and record its end: succeeded (or discarded), cancelled or failed."""
    heartbeat.start()
    try:
        result: ClusteringResult = cluster(
            rows,
            job.k,
            **queued.domain,  # a ball, or per-column bounds clustered in the scaled space
            progress=_progress_writer(run, heartbeat),
            n_public=queued.count.n_rows,
            relation=queued.count.relation,
            contribution_bound=queued.count.contribution_bound,
            **jobs_service.run_options(job),
        )
        jobs_service.check_ran_as_charged(job, queued.count, result)
    except (JobStopped, RunInterrupted):
        run.stopped()
        return JobStatus.CANCELLED
    except MemberError as exc:  # names the member, never a value of its rows
        log.warning("job %s: %s", run.job_id, exc)
        run.fail(
            f"{exc.member.name} failed during the job ({exc.detail}); the privacy budget it "
            "spent stays charged"
        )
        return JobStatus.FAILED
    except ClusterStalled as exc:  # says which state of the cluster, never a row's
        log.warning("job %s: %s", run.job_id, exc)
        run.fail(f"{exc}; the privacy budget it spent stays charged")
        return JobStatus.FAILED
    except Exception:
        log.exception("job %s failed", run.job_id)
        # Analysts read this: never echo a message that could depend on the rows (e.g. which
        # row overflowed). Parameters were validated at admission; the log has the details.
        run.fail(
            "clustering failed; the privacy budget it spent stays "
            f"charged. The worker log has the details (job {run.job_id})."
        )
        return JobStatus.FAILED
    finally:
        heartbeat.finished.set()
    # Swept or stopped meanwhile: "discarded", and the result is never released.
    return run.finish(job, result)
