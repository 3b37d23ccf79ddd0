"""A worker pool per tenant, where the deployment asks for it: a worker with WORKER_TENANTS takes
only those tenants' jobs, and the shared workers (DEDICATED_TENANTS) never take them, so one
tenant's jobs neither wait behind another's nor tell it their length by the wait. Real database,
Redis and RQ worker class; the jobs run in this process, in burst mode."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.kit import queue
from app.kit.config import Settings
from app.kit.db.session import session_scope
from app.models import Job, JobStatus
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes
from tests.support.db import make_key
from tests.support.fair_worker import run_tasks_here

pytestmark = pytest.mark.integration


def _one_job(client: TestClient, owner: str, analyst: str) -> str:
    rows = np.random.default_rng(5).normal(0.0, 0.3, (200, 2))
    body = csv_bytes(rows, ["a", "b"], digits=5)
    dataset = uploaded(client, owner, body, name="p", epsilon="1000", radius="2")["id"]
    r = client.post(f"/v1/datasets/{dataset}/jobs", headers=auth(analyst), json={"k": 1, "mu": 0.1})
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _statuses(settings: Settings, *ids: str) -> list[str]:
    with session_scope(settings.resolved_database_url) as s:
        return [str(s.get(Job, uuid.UUID(i)).status) for i in ids]


def test_a_tenants_pool_takes_only_its_jobs_and_the_shared_workers_leave_them(
    client: TestClient, keys, settings: Settings
) -> None:
    other_analyst = make_key(settings.resolved_database_url, "other", "analyst")
    acme = _one_job(client, keys["owner"], keys["analyst"])
    other = _one_job(client, keys["other_owner"], other_analyst)
    assert queue.queued_count(settings) == 2

    shared = settings.model_copy(update={"dedicated_tenants": ["other"]})
    names = {q.name for q in queue.worker_queues(shared)}
    assert queue.tenant_queue_name(settings, "acme") in names
    assert queue.tenant_queue_name(settings, "other") not in names
    run_tasks_here(shared)
    assert _statuses(settings, acme, other) == [JobStatus.SUCCEEDED, JobStatus.QUEUED]

    pool = settings.model_copy(update={"worker_tenants": ["other"]})
    assert [q.name for q in queue.worker_queues(pool)] == [
        queue.tenant_queue_name(settings, "other")
    ]
    run_tasks_here(pool)
    assert _statuses(settings, acme, other) == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]


def test_the_tenant_lists_are_read_from_comma_separated_settings() -> None:
    s = Settings(worker_tenants=" acme, beta ,", dedicated_tenants="acme")  # type: ignore[arg-type]
    assert s.worker_tenants == ["acme", "beta"] and s.dedicated_tenants == ["acme"]
