"""Dask jobs for the integration tests: settings for a cluster, a small dataset of two blobs,
submitting a job through the API, and a long job running in a thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.kit.config import get_settings
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, rows_around
from tests.support.patience import Patience


def use(monkeypatch: pytest.MonkeyPatch, **settings: str) -> None:
    for name, value in settings.items():
        monkeypatch.setenv(f"PRIVCLUST_{name}", value)
    get_settings.cache_clear()


def dataset(client: TestClient, key: str, n: int = 600) -> dict:
    rows = rows_around(np.array([[-3.0, -3.0], [3.0, 3.0]]), n, 0.5, np.random.default_rng(4))
    body = csv_bytes(rows, ["a", "b"])
    return uploaded(
        client, key, body, name="d", filename="d.csv", epsilon="5", delta="1e-6", radius="10"
    )


def submit(client: TestClient, key: str, dataset_id: str, body: dict) -> str:
    r = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json=body)
    assert r.status_code == 202, r.json()
    return str(r.json()["id"])


def ledger_kinds(client: TestClient, key: str, dataset_id: str) -> list[str]:
    r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key))
    return [e["kind"] for e in r.json()["entries"]]


def run_in_thread(job_id: str) -> tuple[threading.Thread, list[str]]:
    from worker.tasks import run_clustering_job

    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(run_clustering_job(job_id)))
    thread.start()
    return thread, outcome


def wait_running(client: TestClient, key: str, job_id: str) -> None:
    patience = Patience(60)
    while patience.left():
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()
        if job["status"] == "running" and (job.get("progress") or {}).get("iteration", 0) >= 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never got going: {job}")


def long_job(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> tuple[dict, str, threading.Thread, list[str]]:
    """A pe-means job of 10 passes over 2,000 rows in partitions of 100 with no cache (every
    pass is many tasks, so the job lasts seconds), running in a thread: (its dataset, its id,
    the thread, the status the task returns once it ends)."""
    use(
        monkeypatch,
        DASK_SCHEDULER=scheduler,
        PARTITION_ROWS="100",
        DASK_CACHE_MB="0",
        DASK_CONNECT_SECONDS="2",
    )
    ds = dataset(client, keys["owner"], n=2000)
    body = {"k": 2, "epsilon": 2.0, "algorithm": "pe-means"}
    job_id = submit(client, keys["analyst"], ds["id"], body)
    thread, outcome = run_in_thread(job_id)
    wait_running(client, keys["analyst"], job_id)
    return ds, job_id, thread, outcome
