"""Talking to the API as a client does: bearer headers, uploads, keys made by an admin, and
waiting for a job to reach a status. One client type serves both the in-process TestClient and
a real process's httpx.Client (the TestClient is an httpx.Client)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Collection
from typing import Any

import httpx

from tests.support.patience import Patience


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def bearer_client(base_url: str, key: str) -> httpx.Client:
    """A client of a running API that sends `key` with every request."""
    return httpx.Client(base_url=base_url, timeout=30, headers=auth(key))


def upload(
    client: httpx.Client,
    key: str | None,
    data: bytes,
    *,
    name: str = "blobs",
    filename: str = "data.csv",
    epsilon: float | str = 2.0,
    delta: float | str = 1e-6,
    radius: float | str | None = "10",
    **fields: str,
) -> dict:
    """POST /v1/datasets with `data` as the file; its status, JSON body and content type.

    `key` None sends no Authorization header (the client carries its own); `radius` None sends
    none (for another domain given in `fields`, or none at all).
    """
    form = {"name": name, "epsilon": str(epsilon), "delta": str(delta)}
    if radius is not None:
        form["radius"] = str(radius)
    resp = client.post(
        "/v1/datasets",
        headers=auth(key) if key else None,
        data={**form, **fields},
        files={"file": (filename, io.BytesIO(data), "text/csv")},
    )
    return {
        "status": resp.status_code,
        "body": resp.json(),
        "ctype": resp.headers.get("content-type", ""),
    }


def uploaded(client: httpx.Client, key: str | None, data: bytes, **options: Any) -> dict:
    """The dataset an `upload` (same options) created; fails unless it answered 201."""
    up = upload(client, key, data, **options)
    assert up["status"] == 201, up
    return up["body"]


def new_keys(admin: httpx.Client, tenant: str = "acme") -> tuple[str, str]:
    """An owner's and an analyst's secret for `tenant`, created through the API by `admin`."""
    owner = admin.post("/v1/api-keys", json={"tenant": tenant, "role": "owner"}).json()
    analyst = admin.post("/v1/api-keys", json={"tenant": tenant, "role": "analyst"}).json()
    return owner["key"], analyst["key"]


def wait_for_job(
    client: httpx.Client,
    job_id: str,
    statuses: Collection[str],
    timeout: float,
    logs: Callable[[], str],
) -> dict:
    """The job once its status is one of `statuses`; fails with the logs after `timeout` s on
    a quiet machine (longer while the cores are busy: Patience)."""
    patience = Patience(timeout)
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        assert patience.left(), f"job stuck in {job}\n{logs()}"
        time.sleep(0.2)


def running_long_job(analyst: httpx.Client, dataset_id: str, logs: Callable[[], str]) -> dict:
    """A job of 1000 iterations (k = 8, epsilon 1: tens of seconds) submitted on the dataset,
    once a worker runs it."""
    job = analyst.post(
        f"/v1/datasets/{dataset_id}/jobs",
        json={"k": 8, "epsilon": 1.0, "params": {"iterations": 1000}},
    ).json()
    running = wait_for_job(analyst, job["id"], {"running", "succeeded", "failed"}, 60, logs)
    assert running["status"] == "running", running
    return job
