"""GET /metrics: admin-only, Prometheus text format (read back with prometheus-client's own
parser), and every counter and gauge moves when its event happens (real database and Redis)."""

from __future__ import annotations

import math
import os
import platform
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import __version__
from app.jobs import service as jobs_service
from app.kit.config import Settings
from app.kit.db.session import session_scope
from app.ledger import service as ledger
from app.models import Job
from tests.support.api import auth, upload, uploaded
from tests.support.data import csv_bytes
from tests.support.db import admit, make_dataset
from tests.support.processes import log_tail, start_cli, stop, wait_until

pytestmark = pytest.mark.integration


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient, admin: str) -> Samples:
    r = client.get("/metrics", headers=auth(admin))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_are_for_admin_keys_only(client: TestClient, keys) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=auth(keys["owner"])).status_code == 403
    assert client.get("/metrics", headers=auth(keys["analyst"])).status_code == 403
    assert client.get("/metrics", headers=auth(keys["admin"])).status_code == 200
    # Not part of the REST contract that generated clients are built from.
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_every_metric_moves_when_its_event_happens(client: TestClient, keys, settings) -> None:
    from worker.tasks import run_clustering_job

    admin, owner, analyst = keys["admin"], keys["owner"], keys["analyst"]
    before = scrape(client, admin)
    assert value(before, "privclust_database_up") == 1
    assert value(before, "privclust_queue_up") == 1

    # An upload: created, with its body's bytes; a bad file: refused.
    body = csv_bytes(np.random.default_rng(1).normal(0.0, 1.0, (300, 2)), ["a", "b"], digits=5)
    created = uploaded(client, owner, body, name="m", filename="d.csv", epsilon="3", delta="1e-6")
    dataset = uuid.UUID(created["id"])
    bad = upload(
        client, owner, b"a,b\n1,x\n", name="bad", filename="d.csv", epsilon="1", delta="1e-6",
        radius="1",
    )  # fmt: skip
    assert bad["status"] == 400
    s = scrape(client, admin)
    assert value(s, "privclust_uploads_total", outcome="created") == 1
    assert value(s, "privclust_uploads_total", outcome="refused") == 1
    created_bytes = value(s, "privclust_upload_bytes_total", outcome="created")
    assert len(body) < created_bytes < len(body) + 1024  # the file plus multipart framing
    assert value(s, "privclust_upload_bytes_total", outcome="refused") > 0
    assert value(s, "privclust_datasets", state="stored") == 1

    # A job: queued in the database and waiting in Redis.
    r = client.post(
        f"/v1/datasets/{dataset}/jobs",
        headers=auth(analyst),
        json={"algorithm": "pe-means", "k": 2, "epsilon": 1.0},
    )
    assert r.status_code == 202, r.json()
    job_id = r.json()["id"]
    s = scrape(client, admin)
    assert value(s, "privclust_jobs", status="queued", algorithm="pe-means") == 1
    assert value(s, "privclust_queue_depth") == 1
    # ... by tenant: acme's one job waits; the other tenant (no dataset) has no series.
    assert value(s, "privclust_tenant_jobs_queued", tenant="acme") == 1
    assert 0 <= value(s, "privclust_tenant_job_oldest_queued_age_seconds", tenant="acme") < 60
    assert ("privclust_tenant_jobs_queued", (("tenant", "other"),)) not in s

    # It runs (the worker's own task function, in this process) and succeeds.
    assert run_clustering_job(job_id) == "succeeded"
    s = scrape(client, admin)
    assert value(s, "privclust_jobs", status="queued", algorithm="pe-means") == 0
    assert value(s, "privclust_tenant_jobs_queued", tenant="acme") == 0
    assert value(s, "privclust_tenant_job_oldest_queued_age_seconds", tenant="acme") == 0
    assert value(s, "privclust_jobs", status="succeeded", algorithm="pe-means") == 1
    assert value(s, "privclust_job_duration_seconds_count", algorithm="pe-means") == 1
    assert value(s, "privclust_job_duration_seconds_bucket", algorithm="pe-means", le="+Inf") == 1
    assert value(s, "privclust_job_duration_seconds_sum", algorithm="pe-means") >= 0
    # The buckets start at 10 ms: a small job's run time falls in a bucket of its own size.
    bounds = sorted(
        float(dict(labels)["le"])
        for (name, labels) in s
        if name == "privclust_job_duration_seconds_bucket" and dict(labels)["le"] != "+Inf"
    )
    assert bounds[0] == 0.01 and bounds[-1] >= 3600

    # A submission over the budget: a 409, counted as a budget refusal.
    refusals = value(s, "privclust_budget_refusals_total")
    r = client.post(
        f"/v1/datasets/{dataset}/jobs",
        headers=auth(analyst),
        json={"algorithm": "pe-means", "k": 2, "epsilon": 50.0},
    )
    assert r.status_code == 409 and r.json()["code"] == "budget-exceeded"
    s = scrape(client, admin)
    assert value(s, "privclust_budget_refusals_total") == refusals + 1

    # A running job whose worker went silent: failed by the sweeper, counted as swept and failed.
    r = client.post(
        f"/v1/datasets/{dataset}/jobs",
        headers=auth(analyst),
        json={"algorithm": "pe-means", "k": 2, "epsilon": 0.1},
    )
    assert r.status_code == 202, r.json()
    silent = uuid.UUID(r.json()["id"])
    with session_scope(settings.resolved_database_url) as session:
        job = session.get(Job, silent)
        assert job is not None
        from app.kit import repository as kit_repo

        long_ago = kit_repo.now() - timedelta(seconds=3600)
        job.status, job.started_at, job.heartbeat_at = "running", long_ago, long_ago
    with session_scope(settings.resolved_database_url) as session:
        assert jobs_service.sweep_stale_jobs(session, settings.stale_job_seconds) == [silent]
    s = scrape(client, admin)
    assert value(s, "privclust_jobs_swept_total") == 1
    assert value(s, "privclust_jobs_failed_total") == 1
    assert value(s, "privclust_jobs", status="failed", algorithm="pe-means") == 1

    # The counters count the append-only ledger, not the jobs table: were a failed job's row
    # ever removed, they would not go down (a counter that drops reads as a reset to Prometheus).
    with session_scope(settings.resolved_database_url) as session:
        session.delete(session.get(Job, silent))
    s = scrape(client, admin)
    assert value(s, "privclust_jobs", status="failed", algorithm="pe-means") == 0  # a gauge
    assert value(s, "privclust_jobs_failed_total") == 1
    assert value(s, "privclust_jobs_swept_total") == 1

    # Dataset deletion moves it from stored to deleted.
    assert client.delete(f"/v1/datasets/{dataset}", headers=auth(owner)).status_code in (200, 204)
    s = scrape(client, admin)
    assert value(s, "privclust_datasets", state="stored") == 0
    assert value(s, "privclust_datasets", state="deleted") == 1


def test_build_info_names_the_version(client: TestClient, keys) -> None:
    s = scrape(client, keys["admin"])
    info = [labels for (name, labels) in s if name == "privclust_build_info"]
    assert info == [(("python", platform.python_version()), ("version", __version__))]
    assert (
        value(s, "privclust_build_info", version=__version__, python=platform.python_version()) == 1
    )


def test_the_answering_process_is_described(client: TestClient, keys) -> None:
    s = scrape(client, keys["admin"])
    assert value(s, "process_resident_memory_bytes") > 1_000_000
    assert value(s, "process_start_time_seconds") > 1.6e9
    assert ("process_cpu_seconds_total", ()) in s


def test_budget_figures_by_tenant(client: TestClient, keys, settings: Settings) -> None:
    url = settings.resolved_database_url
    acme = make_dataset(url, mu_cap=2.0, tenant="acme", count_mu=0.2, n_rows_dp=1000)
    other = make_dataset(url, mu_cap=1.0, tenant="other")
    s = scrape(client, keys["admin"])
    assert value(s, "privclust_budget_mu_spent", tenant="acme") == pytest.approx(0.2)
    assert value(s, "privclust_budget_mu_spent", tenant="other") == 0
    assert value(s, "privclust_budget_datasets_low", tenant="acme") == 0

    # Admitted: reserved; started: spent (composed with the row count's release, in squares).
    with session_scope(url) as session:
        admitted = admit(session, acme, jobs_service.JobRequest(k=2, mu=1.0))
    assert admitted is not None
    s = scrape(client, keys["admin"])
    assert value(s, "privclust_budget_mu_reserved", tenant="acme") == pytest.approx(1.0)
    with session_scope(url) as session:
        job = session.get(Job, admitted[0])
        assert job is not None
        ledger.commit(session, job)
    s = scrape(client, keys["admin"])
    assert value(s, "privclust_budget_mu_spent", tenant="acme") == pytest.approx(math.hypot(0.2, 1))
    assert value(s, "privclust_budget_mu_reserved", tenant="acme") == 0

    # A job that leaves 9% of the cap as the console shows it (1 - 0.954^2 of mu_cap^2; mu=0.3
    # remains, 30% of the cap in plain mu): the dataset is low until it is refunded.
    with session_scope(url) as session:
        greedy = admit(session, other, jobs_service.JobRequest(k=2, mu=0.954))
    assert greedy is not None
    s = scrape(client, keys["admin"])
    assert value(s, "privclust_budget_datasets_low", tenant="other") == 1
    assert value(s, "privclust_budget_datasets_low", tenant="acme") == 0
    with session_scope(url) as session:
        job = session.get(Job, greedy[0])
        assert job is not None
        ledger.refund(session, job, note="test")
    s = scrape(client, keys["admin"])
    assert value(s, "privclust_budget_datasets_low", tenant="other") == 0
    assert value(s, "privclust_budget_mu_reserved", tenant="other") == 0


def test_a_capped_keys_remaining_budget_is_its_least_left(client: TestClient, keys) -> None:
    owner, analyst = auth(keys["owner"]), auth(keys["analyst"])
    me = client.get("/v1/me", headers=analyst).json()["id"]
    datasets = [
        uploaded(client, keys["owner"], csv_bytes(np.zeros((50, 2))), epsilon=4)["id"]
        for _ in range(2)
    ]
    for dataset, cap in zip(datasets, (1.0, 0.6), strict=True):
        path = f"/v1/datasets/{dataset}/budget/keys/{me}"
        assert client.put(path, headers=owner, json={"mu": cap}).status_code == 200
    job = {"k": 2, "mu": 0.8}
    assert client.post(f"/v1/datasets/{datasets[0]}/jobs", headers=analyst, json=job).is_success
    s = scrape(client, keys["admin"])
    left = value(s, "privclust_key_budget_mu_remaining", tenant="acme", key_id=me)
    assert left == pytest.approx(0.6)  # each cap leaves 0.6: sqrt(1 - 0.8^2), and 0.6 untouched
    job = {"k": 2, "mu": 0.5}
    assert client.post(f"/v1/datasets/{datasets[1]}/jobs", headers=analyst, json=job).is_success
    s = scrape(client, keys["admin"])
    left = value(s, "privclust_key_budget_mu_remaining", tenant="acme", key_id=me)
    assert left == pytest.approx(math.sqrt(0.36 - 0.25))


def test_live_workers_come_from_rqs_worker_registry(
    client: TestClient, keys, tmp_path: Path
) -> None:
    def workers() -> float:
        s = scrape(client, keys["admin"])
        return sum(v for (name, _), v in s.items() if name == "privclust_workers")

    assert workers() == 0
    proc = start_cli("worker", dict(os.environ), tmp_path / "worker.log")
    try:
        wait_until(lambda: workers() == 1, proc=proc, log=log_tail(tmp_path / "worker.log"))
        s = scrape(client, keys["admin"])
        assert value(s, "privclust_workers", state="idle") == 1
        assert value(s, "privclust_workers", state="busy") == 0
    finally:
        stop(proc, timeout=30)
    # A worker that stops leaves the registry (one killed outright drops out once its key
    # expires without heartbeats).
    assert workers() == 0


def test_the_consoles_and_docs_files_are_labelled_by_route(client: TestClient, keys) -> None:
    paths = {
        "/console": "/console/{path}",  # the redirect to /console/
        "/console/": "/console/{path}",
        "/console/js/main.js": "/console/{path}",
        "/console/console.css": "/console/{path}",
        "/docs": "/docs",
        "/redoc": "/redoc",
        "/openapi.json": "/openapi.json",
        "/static-offline-docs/swagger-ui-bundle.js": "/static-offline-docs/{path}",
    }
    for path in paths:
        assert client.get(path, follow_redirects=False).status_code in (200, 307), path
    s = scrape(client, keys["admin"])
    counted = {
        dict(labels)["route"]: v
        for (name, labels), v in s.items()
        if name == "privclust_http_request_duration_seconds_count"
    }
    for route in set(paths.values()):
        assert counted.get(route, 0) >= 1, (route, counted)
    assert "unmatched" not in counted, counted


def test_http_latency_is_labelled_by_route_template_not_raw_path(client: TestClient, keys) -> None:
    admin = keys["admin"]
    for _ in range(3):
        client.get(f"/v1/jobs/{uuid.uuid4()}", headers=auth(keys["analyst"]))
    client.get("/no/such/path/" + uuid.uuid4().hex)
    s = scrape(client, admin)
    labels = {"method": "GET", "route": "/v1/jobs/{job_id}", "status": "404"}
    assert value(s, "privclust_http_request_duration_seconds_count", **labels) == 3
    assert value(s, "privclust_http_request_duration_seconds_sum", **labels) > 0
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert value(s, "privclust_http_request_duration_seconds_count", **unmatched) == 1
    routes = {dict(labels_)["route"] for (name, labels_) in s if "route" in dict(labels_)}
    assert not [r for r in routes if any(c.isdigit() for c in r.replace("v1", ""))], routes


def test_a_queue_outage_is_reported_not_raised(settings: Settings, keys) -> None:
    from app.main import create_app

    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})  # nothing listens
    with TestClient(create_app(down)) as c:
        s = scrape(c, keys["admin"])
    assert value(s, "privclust_queue_up") == 0
    assert value(s, "privclust_database_up") == 1
    assert ("privclust_queue_depth", ()) not in s
    assert ("privclust_jobs_swept_total", ()) in s
