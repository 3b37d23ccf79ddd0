"""Reconciles the database with the queue: a queued job whose RQ entry was lost runs after all.

A job is admitted (its budget reserved) and committed before it is enqueued, and the queue can
lose an entry afterwards: Redis flushed or restarted without its data, the API killed between
the commit and the enqueue, a worker killed after taking the job but before starting it (RQ
lets its entry expire), a worker failing to reach the database when it took the job. The job
would then stay queued, holding its reservation, forever.

No noise has been drawn for a queued job, so enqueuing it again is safe: the worker's
compare-and-set queued -> running lets a job run at most once however many queue entries name
it. A job whose entry was lost MAX_REQUEUES times is failed and refunded instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import cast

from redis import Redis
from redis.exceptions import LockError
from rq import Queue
from sqlalchemy.orm import Session, sessionmaker

from app.jobs import service as jobs_service
from app.kit import queue as queue_service
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.db.session import unit_of_work

log = logging.getLogger("privclust.reconcile")

MAX_REQUEUES = 3
REQUEUE_COUNT_TTL = 7 * 24 * 3600
LOST_TOO_OFTEN = (
    "the job queue lost this job {n} times before a worker could start it; it was not run "
    "and its budget was refunded"
)


@dataclass
class Reconciled:
    requeued: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)


def _requeue_count_key(job_id: uuid.UUID) -> str:
    return f"privclust:requeued:{job_id}"


def job_ids_in_queues(queues: list[Queue]) -> set[str]:
    """Every job id RQ holds for these queues: waiting, being handed to a worker, or running.

    Read in the order a job moves (queue list, intermediate list, started registry), so that a
    job moving while this runs is seen in the later place; one round trip per step, whatever the
    number of queues. A started entry counts only while its worker keeps extending it: one whose
    expiry passed belongs to a worker that died (RQ itself moves such entries to its failed
    registry only at its next maintenance).
    """
    conn: Redis = queues[0].connection
    ids: set[str] = set()
    for keys in ([q.key for q in queues], [q.intermediate_queue_key for q in queues]):
        with conn.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lrange(key, 0, -1)
            ids |= {_text(i) for found in pipe.execute() for i in found}
    with conn.pipeline(transaction=False) as pipe:
        for q in queues:
            pipe.zrangebyscore(q.started_job_registry.key, f"({time.time()}", "+inf")
        live = cast(list[list[bytes]], pipe.execute())
    for q, entries in zip(queues, live, strict=True):
        ids |= {q.started_job_registry.parse_job_id(_text(entry)) for entry in entries}
    return ids


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def reconcile_queue(
    sessions: sessionmaker[Session],
    queue: Queue,
    settings: Settings,
    *,
    grace_seconds: float,
    max_requeues: int = MAX_REQUEUES,
) -> Reconciled:
    """Re-enqueue (or, past `max_requeues`, fail and refund) queued jobs missing from every
    queue (`queue` is the plain one: its connection and name locate the tenants' queues); a
    job goes back to its tenant's queue.

    Only jobs admitted more than `grace_seconds` ago are considered: the API enqueues a job
    just after committing it. One pass at a time across API processes (a Redis lock).
    """
    done = Reconciled()
    conn: Redis = queue.connection
    lock = conn.lock(f"privclust:reconcile:{queue.name}", timeout=120, blocking=False)
    if not lock.acquire():
        return done
    try:
        cutoff = kit_repo.now() - timedelta(seconds=grace_seconds)
        candidates = jobs_service.queued_before(sessions, cutoff)
        if not candidates:
            return done
        present = job_ids_in_queues(queue_service.all_queues(settings, conn))
        for job_id, tenant in candidates:
            if str(job_id) in present:
                continue
            with unit_of_work(sessions) as session:
                # Read again in a new transaction: it may have started (or been cancelled)
                # since the list above was read.
                if not jobs_service.still_queued(session, job_id):
                    continue
                key = _requeue_count_key(job_id)
                lost = int(conn.get(key) or 0)
                if lost >= max_requeues:
                    jobs_service.fail_unqueued(session, job_id, LOST_TOO_OFTEN.format(n=lost + 1))
                    done.failed.append(job_id)
                    log.warning("job %s lost from the queue again: failed and refunded", job_id)
                    continue
            queue_service.enqueue_job(settings, job_id, tenant)
            conn.set(key, lost + 1, ex=REQUEUE_COUNT_TTL)
            done.requeued.append(job_id)
            log.warning("job %s was queued but missing from the queue: enqueued again", job_id)
        return done
    finally:
        with contextlib.suppress(LockError):  # held past its timeout: someone else has it
            lock.release()
