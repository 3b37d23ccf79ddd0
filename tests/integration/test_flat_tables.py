"""Flat tables for dashboards: a job's centres, the ledger and the per-key budgets as JSON rows
or CSV. Both parse with pandas to the same numbers as the JSON results, reading them a hundred
times changes nothing in the ledger, and the ledger filters by key and by time. The job runs
through the worker's task function in this process, as a worker runs it."""

from __future__ import annotations

import io
from datetime import timedelta

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.kit.db.session import session_scope
from app.models import DatasetBudget, LedgerEntry
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, two_blobs

pytestmark = pytest.mark.integration


def _succeeded_job(client: TestClient, owner: str, analyst: str, summaries: bool) -> dict:
    from worker.tasks import run_clustering_job

    ds = uploaded(client, owner, csv_bytes(two_blobs(400)), epsilon=8)
    body = {"k": 2, "epsilon": 2.0, "summaries": summaries}
    job = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=auth(analyst), json=body).json()
    assert run_clustering_job(job["id"]) == "succeeded"
    return client.get(f"/v1/jobs/{job['id']}", headers=auth(analyst)).json()


def _frames(client: TestClient, path: str, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table at `path` read as CSV (?format=csv and Accept: text/csv) and as JSON rows."""
    by_format = client.get(path, params={"format": "csv"}, headers=auth(key))
    by_accept = client.get(path, headers={**auth(key), "Accept": "text/csv"})
    as_json = client.get(path, headers=auth(key))
    assert by_format.headers["content-type"].startswith("text/csv")
    assert by_format.text == by_accept.text
    assert as_json.headers["content-type"].startswith("application/json")
    # read_json rounds the last bit unless told not to (read_csv reads floats exactly),
    # as docs/dashboards.md says.
    return (
        pd.read_csv(io.StringIO(by_format.text)),
        pd.read_json(io.StringIO(as_json.text), precise_float=True),
    )


@pytest.mark.parametrize("summaries", [True, False])
def test_the_centres_table_is_the_jobs_result_row_by_row(client, keys, summaries) -> None:
    job = _succeeded_job(client, keys["owner"], keys["analyst"], summaries)
    result = job["result"]
    csv, rows = _frames(client, f"/v1/jobs/{job['id']}/centres", keys["analyst"])
    columns = ["centre", *result["columns"]] + (["size", "size_se"] if summaries else [])
    for frame in (csv, rows):
        assert list(frame.columns) == columns
        assert frame["centre"].tolist() == list(range(job["k"]))
        assert frame[result["columns"]].to_numpy().tolist() == result["centers"]
        if summaries:
            assert frame["size"].tolist() == result["sizes"]
            assert (frame["size_se"] == result["sizes_se"]).all()


def test_a_job_without_centres_yet_is_a_409(client, keys) -> None:
    ds = uploaded(client, keys["owner"], csv_bytes(two_blobs(100)), epsilon=8)
    job = client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "mu": 0.5}
    ).json()
    answer = client.get(f"/v1/jobs/{job['id']}/centres", headers=auth(keys["analyst"]))
    assert (answer.status_code, answer.json()["code"]) == (409, "job-not-succeeded")


def _ledger_facts(db_url: str) -> tuple[int, list[tuple[str, str, str, int]]]:
    with session_scope(db_url) as s:
        count = s.scalar(select(func.count()).select_from(LedgerEntry)) or 0
        rows = s.execute(
            select(
                DatasetBudget.spent_sq,
                DatasetBudget.reserved_sq,
                DatasetBudget.mu_cap,
                DatasetBudget.jobs,
            )
        ).all()
        return count, sorted(tuple(map(str, r)) for r in rows)  # type: ignore[misc]


def test_the_ledger_and_key_tables_match_their_json_and_reading_spends_nothing(
    client, keys, settings
) -> None:
    owner, analyst = keys["owner"], keys["analyst"]
    job = _succeeded_job(client, owner, analyst, summaries=True)
    dataset = job["dataset_id"]
    me = client.get("/v1/me", headers=auth(analyst)).json()["id"]
    put = client.put(
        f"/v1/datasets/{dataset}/budget/keys/{me}", headers=auth(owner), json={"mu": 3.0}
    )
    assert put.status_code == 200, put.text

    ledger = client.get(f"/v1/datasets/{dataset}/ledger", headers=auth(analyst)).json()
    csv, rows = _frames(client, f"/v1/datasets/{dataset}/ledger/table", analyst)
    for frame in (csv, rows):
        assert frame["id"].tolist() == [e["id"] for e in ledger["entries"]]
        assert frame["kind"].tolist() == [e["kind"] for e in ledger["entries"]]
        mus = [e["mu"] for e in ledger["entries"]]
        assert [None if pd.isna(m) else m for m in frame["mu"]] == mus

    budget = client.get(f"/v1/datasets/{dataset}/budget", headers=auth(analyst)).json()
    csv, rows = _frames(client, f"/v1/datasets/{dataset}/budget/keys", analyst)
    (capped,) = budget["keys"]
    for frame in (csv, rows):
        assert frame["key_id"].tolist() == [capped["key_id"]]
        for name in ("mu_cap", "mu_spent", "mu_reserved", "mu_remaining", "epsilon_remaining"):
            assert frame[name].tolist() == [capped[name]]

    before = _ledger_facts(settings.resolved_database_url)
    paths = [
        f"/v1/jobs/{job['id']}/centres",
        f"/v1/datasets/{dataset}/ledger/table",
        f"/v1/datasets/{dataset}/budget/keys",
        f"/v1/datasets/{dataset}/budget",
    ]
    for i in range(100):
        fmt = "csv" if i % 2 else "json"
        assert client.get(paths[i % 4], params={"format": fmt}, headers=auth(analyst)).is_success
    assert _ledger_facts(settings.resolved_database_url) == before


def test_the_ledger_filters_by_key_and_by_time(client, keys) -> None:
    owner, analyst = keys["owner"], keys["analyst"]
    ds = uploaded(client, owner, csv_bytes(two_blobs(100)), epsilon=8)
    path = f"/v1/datasets/{ds['id']}"
    for key in (owner, analyst, analyst):
        assert client.post(f"{path}/jobs", headers=auth(key), json={"k": 2, "mu": 0.1}).is_success
    me = client.get("/v1/me", headers=auth(analyst)).json()["id"]
    mine = client.get(f"{path}/ledger", params={"key_id": me}, headers=auth(owner)).json()
    assert [e["kind"] for e in mine["entries"]] == ["reserve", "reserve"]
    assert {e["actor"] for e in mine["entries"]} == {me}
    table = client.get(f"{path}/ledger/table", params={"key_id": me, "format": "csv"},
                       headers=auth(owner))  # fmt: skip
    assert pd.read_csv(io.StringIO(table.text))["id"].tolist() == [e["id"] for e in mine["entries"]]

    every = client.get(f"{path}/ledger", headers=auth(owner)).json()["entries"]
    first, last = every[0]["created_at"], every[-1]["created_at"]
    since = client.get(f"{path}/ledger", params={"since": last}, headers=auth(owner)).json()
    assert since["entries"] and all(e["created_at"] >= last for e in since["entries"])
    until = client.get(f"{path}/ledger", params={"until": first}, headers=auth(owner)).json()
    assert until["entries"] == []
    later = pd.Timestamp(last) + timedelta(seconds=1)
    after = client.get(
        f"{path}/ledger", params={"since": later.isoformat()}, headers=auth(owner)
    ).json()
    assert after["entries"] == []
