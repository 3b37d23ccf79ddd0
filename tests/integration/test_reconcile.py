"""Queued jobs whose queue entry was lost: enqueued again, or failed and refunded (real Redis)."""

from __future__ import annotations

import time
import uuid

import pytest
from redis import Redis

from app.jobs import reconcile
from app.kit import queue
from app.kit.config import Settings
from app.kit.db.session import session_factory, session_scope
from app.ledger import repository as ledger_repo
from app.ledger import service as ledger
from app.models import Dataset, Job
from tests.support.db import admitted_job

pytestmark = pytest.mark.integration


def _reconcile(settings: Settings, grace: float = 0.0) -> reconcile.Reconciled:
    return reconcile.reconcile_queue(
        session_factory(settings.resolved_database_url),
        queue.get_queue(settings),
        settings,
        grace_seconds=grace,
    )


def _ledger_kinds(settings: Settings, job_id: uuid.UUID) -> list[str]:
    with session_scope(settings.resolved_database_url) as s:
        return [e.kind for e in ledger_repo.all_ledger_entries_for_job(s, job_id)]


def test_a_queued_job_missing_from_the_queue_is_enqueued_again(settings: Settings) -> None:
    # Committed, never enqueued: as if the API died here.
    _, job_id = admitted_job(settings.resolved_database_url)
    q = queue.tenant_queue(settings, "acme")
    assert str(job_id) not in q.get_job_ids()

    done = _reconcile(settings)
    assert done.requeued == [job_id] and done.failed == []
    assert q.get_job_ids() == [str(job_id)]  # back in its tenant's queue
    with session_scope(settings.resolved_database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.status == "queued"
    assert _ledger_kinds(settings, job_id) == ["reserve"]  # still reserved, nothing else

    # Now that it has an entry, another pass leaves it alone.
    assert _reconcile(settings) == reconcile.Reconciled()
    assert q.get_job_ids() == [str(job_id)]


def test_an_enqueued_or_recent_job_is_left_alone(settings: Settings) -> None:
    _, enqueued = admitted_job(settings.resolved_database_url)
    queue.enqueue_job(settings, enqueued, "acme")
    _, recent = admitted_job(settings.resolved_database_url)
    _, in_the_plain_queue = admitted_job(settings.resolved_database_url)
    queue.enqueue_job(settings, in_the_plain_queue)  # as before tenants had queues
    done = _reconcile(settings, grace=60)
    assert done == reconcile.Reconciled()
    done = _reconcile(settings)
    assert done.requeued == [recent]
    tenant_queue = queue.tenant_queue(settings, "acme")
    assert sorted(tenant_queue.get_job_ids()) == sorted([str(enqueued), str(recent)])
    assert queue.get_queue(settings).get_job_ids() == [str(in_the_plain_queue)]


def _taken_by_a_worker(settings: Settings, job_id: uuid.UUID, ttl: int) -> None:
    """What a worker does when it takes the job: off the queue, into the started registry
    with an expiry that its heartbeats keep extending (negative ttl: it stopped doing so)."""
    from rq.executions import Execution

    q = queue.tenant_queue(settings, "acme")
    queue.enqueue_job(settings, job_id, "acme")
    rq_job = q.fetch_job(str(job_id))
    assert rq_job is not None
    q.remove(rq_job)
    execution = Execution("e1", str(job_id), q.connection)
    with q.connection.pipeline() as pipe:
        q.started_job_registry.add_execution(execution, pipe, ttl=0)
        pipe.execute()
    q.connection.zadd(q.started_job_registry.key, {execution.composite_key: time.time() + ttl})


def test_a_job_running_on_a_worker_is_not_enqueued_again(settings: Settings) -> None:
    _, job_id = admitted_job(settings.resolved_database_url)
    _taken_by_a_worker(settings, job_id, ttl=90)
    assert _reconcile(settings) == reconcile.Reconciled()


def test_a_job_taken_by_a_worker_that_died_is_enqueued_again(settings: Settings) -> None:
    _, job_id = admitted_job(settings.resolved_database_url)
    _taken_by_a_worker(settings, job_id, ttl=-1)
    assert _reconcile(settings).requeued == [job_id]
    assert queue.tenant_queue(settings, "acme").get_job_ids() == [str(job_id)]


def test_a_job_lost_too_often_is_failed_and_refunded(settings: Settings) -> None:
    dataset_id, job_id = admitted_job(settings.resolved_database_url)
    conn = Redis.from_url(settings.redis_url or "")
    conn.set(f"privclust:requeued:{job_id}", reconcile.MAX_REQUEUES)
    done = _reconcile(settings)
    assert done.failed == [job_id] and done.requeued == []
    assert queue.queued_count(settings) == 0
    with session_scope(settings.resolved_database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.status == "failed"
        assert job.error is not None and "refunded" in job.error
        dataset = s.get(Dataset, dataset_id)
        assert dataset is not None
        budget = ledger.budget(s, dataset)
    assert budget.mu_reserved == 0.0 and budget.mu_spent == 0.0
    assert _ledger_kinds(settings, job_id) == ["reserve", "refund", "failed"]
