"""What analysts see of time, through the real API, database and the worker's task run in this
process: a job's start and end and the ledger's times to the whole minute (a run's length grows
with the dataset's exact row count); the owner sees them exact.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes

pytestmark = pytest.mark.integration


def _floored(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp).replace(second=0, microsecond=0)


def test_an_analyst_sees_a_job_and_its_ledger_to_the_minute(client: TestClient, keys) -> None:
    from worker.tasks import run_clustering_job

    rows = np.random.default_rng(5).normal(0.0, 2.0, (60, 2))
    ds = uploaded(client, keys["owner"], csv_bytes(rows, ["a", "b"]), radius="10")
    analyst, owner = auth(keys["analyst"]), auth(keys["owner"])
    r = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=analyst, json={"k": 2, "mu": 0.2})
    assert r.status_code == 202, r.text
    assert run_clustering_job(r.json()["id"]) == "succeeded"

    url = f"/v1/jobs/{r.json()['id']}"
    exact, coarse = client.get(url, headers=owner).json(), client.get(url, headers=analyst).json()
    listed = client.get("/v1/jobs", headers=analyst).json()["items"]
    assert [j["id"] for j in listed] == [coarse["id"]] and listed[0] == coarse
    for name in ("started_at", "finished_at"):
        assert datetime.fromisoformat(coarse[name]) == _floored(exact[name]), name
    assert coarse["created_at"] == exact["created_at"]  # the analyst's own request

    ledger = f"/v1/datasets/{ds['id']}/ledger"
    exact_entries = client.get(ledger, headers=owner).json()["entries"]
    coarse_entries = client.get(ledger, headers=analyst).json()["entries"]
    assert [e["kind"] for e in coarse_entries] == ["cap", "count", "reserve", "commit", "succeeded"]
    for seen, kept in zip(coarse_entries, exact_entries, strict=True):
        assert datetime.fromisoformat(seen["created_at"]) == _floored(kept["created_at"])
        assert {**seen, "created_at": None} == {**kept, "created_at": None}
