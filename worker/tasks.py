"""RQ task functions: a task takes a job id, loads its inputs, clusters, and records the outcome.

Privacy-critical order: the ledger `commit` entry and the queued -> running transition are
committed in one transaction BEFORE any noise is drawn, and the transition is a compare-and-set,
so a job can draw noise at most once: a retried or duplicated RQ job finds it no longer queued.
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

from app.datasets import service as datasets_service
from app.datasets import storage
from app.jobs import repository as jobs_repo
from app.jobs import service as jobs_service
from app.kit import repository as kit_repo
from app.kit.config import get_settings
from app.kit.db.session import session_scope
from app.ledger import service as ledger
from app.models import Dataset, Job
from privclust.clustering import cluster, plan_run

log = logging.getLogger("privclust.worker")


class JobStopped(Exception):
    """Raised from the progress callback to stop a running job (cancelled or swept)."""


def _die_with_parent() -> None:
    """If the worker process is killed, its work horse (this process) must not run on."""
    from rq import get_current_job

    if get_current_job() is not None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - non-glibc systems
            pass


class _Heartbeat(threading.Thread):
    """Records that this job's worker lives, and notices cancellation or sweeping."""

    def __init__(self, db_url: str, job_id: uuid.UUID, every: float) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{job_id}")
        self.db_url, self.job_id, self.every = db_url, job_id, every
        self.stop_requested = threading.Event()
        self.finished = threading.Event()

    def run(self) -> None:
        while not self.finished.wait(self.every):
            try:
                with session_scope(self.db_url) as s:
                    alive = jobs_repo.update_running_job(
                        s, self.job_id, heartbeat_at=kit_repo.now()
                    )
                    job = s.get(Job, self.job_id)
                    if not alive or (job is not None and job.cancel_requested):
                        self.stop_requested.set()
            except Exception:  # the database may blip; the sweeper tolerates a few misses
                log.exception("heartbeat failed for job %s", self.job_id)


def _progress_writer(db_url: str, job_id: uuid.UUID, heartbeat: _Heartbeat) -> Any:
    last = 0.0

    def progress(iteration: int, total: int) -> None:
        nonlocal last
        if heartbeat.stop_requested.is_set():
            raise JobStopped()
        now = time.monotonic()
        if now - last >= 1.0 or iteration >= total:
            last = now
            with session_scope(db_url) as s:
                jobs_repo.update_running_job(
                    s,
                    job_id,
                    progress_iteration=iteration,
                    progress_total=total,
                    heartbeat_at=kit_repo.now(),
                )

    return progress


def run_clustering_job(job_id: str) -> str:
    """The RQ entry point. Returns the final status (RQ's result store is not relied upon)."""
    _die_with_parent()
    settings = get_settings()
    db_url = settings.resolved_database_url
    jid = uuid.UUID(job_id)

    with session_scope(db_url) as s:
        job = s.get(Job, jid)
        if job is None or job.status != "queued":
            return job.status if job is not None else "missing"
        dataset = s.get(Dataset, job.dataset_id)
        assert dataset is not None
        path, center, radius = dataset.storage_path, list(dataset.center), dataset.radius
        # Every use of the row count reads this (N~, or N only when declared public): never the
        # number of rows in the stored matrix.
        count = datasets_service.planning_count(dataset)

    try:
        X = storage.open_rows(path)
    except (OSError, ValueError) as exc:
        # Nothing noisy can have been produced yet: fail and refund. The error (it names the
        # server's storage path) goes to the operator's log, not into the job that analysts read.
        log.warning("job %s: the dataset's rows could not be read: %s", jid, exc)
        with session_scope(db_url) as s:
            jobs_service.fail_unqueued(
                s, jid, "the dataset's rows could not be read (see the worker's log)"
            )
        return "failed"

    # Re-plan from public inputs and refuse (refunded: no noise yet) if the run would differ
    # from what was charged, e.g. after an upgrade changed a default between admit and run.
    with session_scope(db_url) as s:
        job = s.get(Job, jid)
        assert job is not None
        try:
            plan = plan_run(
                count.n_rows,
                int(X.shape[1]),
                job.k,
                relation=count.relation,
                algorithm=job.algorithm,
                mu=job.mu,
                iterations=job.iterations,
                variations=job.params.get("variations"),
                **(
                    {"projection_dim": job.params["projection_dim"]}
                    if "projection_dim" in job.params
                    else {}
                ),
                summaries=job.summaries,
                summary_fraction=job.params.get("summary_fraction"),
            )
            same = (
                plan.releases == job.releases
                and plan.sigma >= job.sigma
                and plan.summary_mu == job.summary_mu
            )
        except ValueError:
            same = False
        if not same:
            jobs_service.fail_unqueued(
                s,
                jid,
                "the job's privacy plan no longer matches what "
                "was charged; it was not run and was refunded",
            )
            return "failed"

    with session_scope(db_url) as s:
        if not jobs_repo.transition_job(
            s,
            jid,
            from_status="queued",
            status="running",
            started_at=kit_repo.now(),
            heartbeat_at=kit_repo.now(),
        ):
            return "skipped"
        job = s.get(Job, jid)
        assert job is not None
        ledger.commit(s, job)
        algorithm, k, mu, sigma = job.algorithm, job.k, job.mu, job.sigma
        releases, iterations, params = job.releases, job.iterations, dict(job.params)
        progress_total = job.progress_total
        summaries, summary_mu = job.summaries, job.summary_mu

    heartbeat = _Heartbeat(db_url, jid, settings.heartbeat_seconds)
    heartbeat.start()
    try:
        result = cluster(
            X,
            k,
            algorithm=algorithm,
            radius=radius,
            center=np.asarray(center, dtype=float),
            mu=mu,
            iterations=iterations,
            variations=params.get("variations"),
            **({"projection_dim": params["projection_dim"]} if "projection_dim" in params else {}),
            progress=_progress_writer(db_url, jid, heartbeat),
            n_public=count.n_rows,
            relation=count.relation,
            summaries=summaries,
            summary_fraction=params.get("summary_fraction"),
        )
        # The noise actually used must be at least what was charged for, and the run must have
        # planned with the dataset's public count and relation (not released a count of its own).
        if (
            result.releases != releases
            or result.sigma < sigma
            or (result.n_public, result.relation, result.count_mu)
            != (count.n_rows, count.relation, None)
            or result.summary_mu != summary_mu
        ):
            raise RuntimeError(
                f"privacy plan mismatch: planned {releases} releases at sigma={sigma} with "
                f"{count}, ran {result.releases} at sigma={result.sigma} with "
                f"n_public={result.n_public}, relation={result.relation}, "
                f"count_mu={result.count_mu}"
            )
    except JobStopped:
        with session_scope(db_url) as s:
            if jobs_repo.update_running_job(s, jid, status="cancelled", finished_at=kit_repo.now()):
                job = s.get(Job, jid)
                assert job is not None
                ledger.record(s, job, "cancelled", note="stopped while running; stays charged")
        return "cancelled"
    except Exception:
        log.exception("job %s failed", jid)
        # Analysts read this: never echo a message that could depend on the rows (e.g. which
        # row overflowed). Parameters were validated at admission; the log has the details.
        message = (
            "clustering failed; the privacy budget it spent stays "
            f"charged. The worker log has the details (job {jid})."
        )
        with session_scope(db_url) as s:
            if jobs_repo.update_running_job(
                s, jid, status="failed", error=message, finished_at=kit_repo.now()
            ):
                job = s.get(Job, jid)
                assert job is not None
                ledger.record(s, job, "failed", note=message)
        return "failed"
    finally:
        heartbeat.finished.set()

    centers = [[float(v) for v in row] for row in result.centers]
    released: dict[str, Any] = {}
    if result.sizes is not None:  # the noisy releases only: nothing exact is stored
        released = {
            "sizes": [int(v) for v in result.sizes],
            "loss": result.loss,
            "loss_se": result.loss_se,
        }
    with session_scope(db_url) as s:
        if not jobs_repo.update_running_job(
            s,
            jid,
            status="succeeded",
            centers=centers,
            **released,
            progress_iteration=progress_total,
            progress_total=progress_total,
            finished_at=kit_repo.now(),
        ):
            # Swept or stopped meanwhile: the result is discarded, never released.
            return "discarded"
        job = s.get(Job, jid)
        assert job is not None
        ledger.record(s, job, "succeeded")
    return "succeeded"
