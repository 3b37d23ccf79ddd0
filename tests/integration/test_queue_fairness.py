"""One tenant's burst does not starve another (the worker takes from each tenant's queue in
turn), and the operator's caps on queued jobs refuse with 429 and a Retry-After, charging
nothing, exactly even under concurrent admissions. Real database, Redis and RQ worker class;
the jobs run in this process (no job process), so their order is the worker's alone."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.jobs import service as jobs_service
from app.kit import queue
from app.kit.config import Settings
from app.kit.db.session import session_factory, session_scope
from app.kit.errors import TooManyQueuedJobs
from app.ledger import service as ledger
from app.models import Dataset, Job
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes
from tests.support.db import make_dataset, make_key
from tests.support.fair_worker import run_tasks_here

pytestmark = pytest.mark.integration


def _dataset(client: TestClient, owner: str) -> str:
    rows = np.random.default_rng(3).normal(0.0, 0.3, (200, 2))
    body = csv_bytes(rows, ["a", "b"], digits=5)
    return uploaded(client, owner, body, name="f", epsilon="1000", radius="2")["id"]


def _submit(client: TestClient, key: str, dataset_id: str, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        r = client.post(
            f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json={"k": 1, "mu": 0.01}
        )
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    return ids


def test_a_second_tenants_job_runs_next_behind_another_tenants_burst(
    client: TestClient, keys, settings: Settings
) -> None:
    other_analyst = make_key(settings.resolved_database_url, "other", "analyst")
    burst = _submit(client, keys["analyst"], _dataset(client, keys["owner"]), 25)
    late = _submit(client, other_analyst, _dataset(client, keys["other_owner"]), 1)[0]
    assert queue.queued_count(settings) == 26

    run_tasks_here(settings, max_jobs=5)
    with session_scope(settings.resolved_database_url) as s:
        started = {str(j.id): j.started_at for j in s.query(Job).filter(Job.started_at.isnot(None))}
    # Of the first five jobs run, the other tenant's is the second: one job per busy tenant.
    assert late in started and len(started) == 5
    order = sorted(started, key=lambda i: started[i])
    assert order.index(late) <= 1, order
    assert set(order) - {late} <= set(burst)


def test_the_tenant_cap_refuses_with_429_and_charges_nothing(
    client: TestClient, keys, settings: Settings, monkeypatch
) -> None:
    settings.max_queued_jobs_per_tenant = 2
    ds = _dataset(client, keys["owner"])
    _submit(client, keys["analyst"], ds, 2)
    budget = client.get(f"/v1/datasets/{ds}/budget", headers=auth(keys["owner"])).json()
    url = f"/v1/datasets/{ds}/jobs"
    r = client.post(url, headers=auth(keys["owner"]), json={"k": 1, "mu": 0.01})
    assert r.status_code == 429 and r.headers["Retry-After"] == "5", r.text
    problem = r.json()
    assert problem["code"] == "too-many-queued-jobs" and problem["status"] == 429
    assert (problem["scope"], problem["queued"], problem["limit"]) == ("tenant", 2, 2)
    assert client.get(f"/v1/datasets/{ds}/budget", headers=auth(keys["owner"])).json() == budget
    sweep = client.post(
        f"/v1/datasets/{ds}/sweeps", headers=auth(keys["owner"]), json={"ks": [1, 2], "mu": 0.1}
    )
    assert sweep.status_code == 429
    # Another tenant is not held back by this one's queue.
    other = _dataset(client, keys["other_owner"])
    assert (
        client.post(
            f"/v1/datasets/{other}/jobs",
            headers=auth(keys["other_owner"]),
            json={"k": 1, "mu": 0.01},
        ).status_code
        == 202
    )
    # Once a queued job is no longer queued (here: cancelled), there is room again.
    queued = client.get("/v1/jobs?status=queued", headers=auth(keys["owner"])).json()["items"]
    client.post(f"/v1/jobs/{queued[0]['id']}/cancel", headers=auth(keys["owner"]))
    assert (
        client.post(url, headers=auth(keys["owner"]), json={"k": 1, "mu": 0.01}).status_code == 202
    )


def test_the_key_cap_counts_the_keys_own_queued_jobs(
    client: TestClient, keys, settings: Settings
) -> None:
    settings.max_queued_jobs_per_key = 1
    ds = _dataset(client, keys["owner"])
    _submit(client, keys["analyst"], ds, 1)
    url = f"/v1/datasets/{ds}/jobs"
    r = client.post(url, headers=auth(keys["analyst"]), json={"k": 1, "mu": 0.01})
    assert r.status_code == 429 and r.json()["scope"] == "key"
    # The same tenant's other key has room; a replay of an admitted request is not refused.
    headers = {**auth(keys["owner"]), "Idempotency-Key": "once"}
    first = client.post(url, headers=headers, json={"k": 1, "mu": 0.01})
    again = client.post(url, headers=headers, json={"k": 1, "mu": 0.01})
    assert first.status_code == 202 and again.status_code == 202
    assert again.headers["Idempotent-Replayed"] == "true"


def test_concurrent_admissions_never_pass_the_tenant_cap(settings: Settings) -> None:
    """24 admissions at once on three datasets of one tenant (three budget locks), with room
    for 5 queued jobs: exactly 5 are admitted, the others refused before any charge."""
    url = settings.resolved_database_url
    datasets = [make_dataset(url, mu_cap=10.0) for _ in range(3)]
    limits = jobs_service.QueueLimits(per_tenant=5)
    factory = session_factory(url)
    start = Barrier(24)

    def one(i: int) -> bool:
        start.wait()  # no connection is held while waiting: the pool has fewer than 24
        session = factory()
        try:
            dataset = session.get(Dataset, datasets[i % 3])
            req = jobs_service.JobRequest(k=2, mu=0.1)
            admission = jobs_service.JobAdmission(dataset, req, None, None, limits)
            plan = admission.plan()
            ledger.begin_budget_transaction(session)
            try:
                admission.submit(session, plan)
                session.commit()
                return True
            except TooManyQueuedJobs:
                session.rollback()
                return False
        finally:
            session.close()

    with ThreadPoolExecutor(24) as pool:
        admitted = sum(pool.map(one, range(24)))
    assert admitted == 5
    with session_scope(url) as s:
        assert s.query(Job).count() == 5
        assert sum(ledger.running(s, d).jobs for d in datasets) == 5


def test_enqueue_names_the_tenants_queue_once_for_the_workers(settings: Settings) -> None:
    job_a, job_b = uuid.uuid4(), uuid.uuid4()
    queue.enqueue_job(settings, job_a, "acme")
    queue.enqueue_job(settings, job_b, "acme")
    names = [q.name for q in queue.all_queues(settings)]
    assert names == [settings.queue_name, queue.tenant_queue_name(settings, "acme")]
    assert "acme" not in names[1]  # a digest: no tenant name in Redis keys
    assert queue.tenant_queue(settings, "acme").get_job_ids() == [str(job_a), str(job_b)]
    assert queue.queued_count(settings) == 2
