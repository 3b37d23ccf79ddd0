"""The REST contract through the real app, a real database and a real Redis (TestClient)."""

from __future__ import annotations

import io
import json
import math
import subprocess
import uuid

import numpy as np
import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from app.keys.auth import CurrentKey, TenantKey
from app.kit.deps import UnitOfWorkRoute
from tests.support.api import auth, upload
from tests.support.data import csv_bytes, two_blobs
from tests.support.db import stored_files
from tests.support.workers import registered_worker

pytestmark = pytest.mark.integration


def test_health(client: TestClient, settings) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    # Ready only once a worker can take a job: one registered on the queue, whose process
    # lives (a registration left by a dead worker of this host does not count).
    waiting = client.get("/readyz")
    assert waiting.status_code == 503 and waiting.json()["failing"] == ["worker"]
    with registered_worker(settings, pid=_dead_pid()):
        assert client.get("/readyz").json()["failing"] == ["worker"]
    with registered_worker(settings):
        assert client.get("/readyz").json() == {"status": "ready"}


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_missing_and_invalid_keys_are_401_problems(client: TestClient, keys) -> None:
    r = client.get("/v1/datasets")
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "missing-api-key"
    r = client.get("/v1/datasets", headers=auth("pck_not-a-key"))
    assert r.status_code == 401 and r.json()["code"] == "invalid-api-key"


def test_a_bad_key_is_answered_before_a_bad_body(client: TestClient, keys) -> None:
    # Keys are checked in the endpoint's thread, after FastAPI validated the request: a caller
    # without a valid key must still get 401 (or 403 for the wrong role), not the 422 that
    # would tell it what the route accepts.
    bad_job = {"k": "many", "epsilon": -1}
    path = f"/v1/datasets/{uuid.uuid4()}/jobs"
    r = client.post(path, json=bad_job)
    assert r.status_code == 401 and r.json()["code"] == "missing-api-key"
    r = client.post(path, headers=auth("pck_not-a-key"), json=bad_job)
    assert r.status_code == 401 and r.json()["code"] == "invalid-api-key"
    r = client.get("/v1/jobs/not-a-uuid", headers=auth("pck_not-a-key"))
    assert r.status_code == 401
    r = client.post(path, headers=auth(keys["admin"]), json=bad_job)
    assert r.status_code == 403 and r.json()["code"] == "forbidden-role"
    # With a key that may call the route, the body's problem is what comes back.
    r = client.post(path, headers=auth(keys["analyst"]), json=bad_job)
    assert r.status_code == 422 and r.json()["code"] == "invalid-parameter"


def test_admin_creates_lists_and_revokes_keys(client: TestClient, keys) -> None:
    r = client.post(
        "/v1/api-keys", headers=auth(keys["admin"]), json={"tenant": "newco", "role": "analyst"}
    )
    assert r.status_code == 201
    created = r.json()
    assert created["key"].startswith("pck_") and created["role"] == "analyst"
    listing = client.get("/v1/api-keys", headers=auth(keys["admin"])).json()
    assert created["id"] in {k["id"] for k in listing["items"]}
    assert all("key" not in k for k in listing["items"])
    assert client.get("/v1/datasets", headers=auth(created["key"])).status_code == 200
    r = client.delete(f"/v1/api-keys/{created['id']}", headers=auth(keys["admin"]))
    assert r.status_code == 200 and r.json()["revoked_at"]
    r = client.get("/v1/datasets", headers=auth(created["key"]))
    assert r.status_code == 401
    # Only admins manage keys.
    r = client.post(
        "/v1/api-keys", headers=auth(keys["owner"]), json={"tenant": "acme", "role": "owner"}
    )
    assert r.status_code == 403 and r.json()["code"] == "forbidden-role"


def test_upload_then_read_budget_and_ledger(client: TestClient, keys, settings) -> None:
    up = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=2.0, delta=1e-6)
    assert up["status"] == 201, up
    ds = up["body"]
    assert (ds["n_rows"], ds["n_cols"], ds["columns"]) == (300, 2, ["f0", "f1"])
    assert ds["domain"] == {
        "center": [0.0, 0.0],
        "radius": 10.0,
        "kind": "ball",
        "lower": None,
        "upper": None,
    }
    assert (ds["count_public"], ds["relation"], ds["warnings"]) == (False, "add-remove", [])
    # The noisy count costs 0.1 x mu_cap: std 1/count_mu = 22 rows here, so a gap of 250 (11
    # standard deviations) never happens by chance.
    mu_cap = ds["budget"]["mu_cap"]
    count_mu = ds["count_mu"]
    assert count_mu == pytest.approx(0.1 * mu_cap)
    assert isinstance(ds["n_rows_dp"], int) and abs(ds["n_rows_dp"] - 300) < 250
    # The count is the budget's first spending: sqrt(mu_cap^2 - count_mu^2) remains.
    assert ds["budget"]["mu_spent"] == pytest.approx(count_mu)
    assert ds["budget"]["mu_remaining"] == pytest.approx(math.sqrt(mu_cap**2 - count_mu**2))
    assert ds["budget"]["epsilon_remaining"] < 2.0
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["analyst"]))
    assert budget.status_code == 200 and budget.json()["mu_cap"] == mu_cap
    assert budget.json()["mu_spent"] == pytest.approx(count_mu) and budget.json()["jobs"] == 0
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["analyst"])).json()
    entries = ledger["entries"]
    assert [e["kind"] for e in entries] == ["cap", "count"]
    count = entries[1]
    assert count["mu"] == pytest.approx(count_mu)
    assert count["sigma"] == pytest.approx(1 / count_mu) and count["iterations"] == 1
    assert count["job_id"] is None and "row count" in count["note"]
    assert ledger["budget"]["mu_spent"] == pytest.approx(count_mu)
    assert len(stored_files(settings)) == 1


def _is_analyst_view(ds: dict, n_rows_dp: int) -> bool:
    return ds.get("n_rows") is None and ds["n_rows_dp"] == n_rows_dp


def test_analysts_never_see_the_exact_row_count(client: TestClient, keys) -> None:
    owner = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    assert owner["n_rows"] == 300 and isinstance(owner["n_rows_dp"], int)
    n_dp = owner["n_rows_dp"]
    h = auth(keys["analyst"])
    got = client.get(f"/v1/datasets/{owner['id']}", headers=h).json()
    assert _is_analyst_view(got, n_dp)
    listed = client.get("/v1/datasets", headers=h).json()["items"]
    assert [d["id"] for d in listed] == [owner["id"]] and _is_analyst_view(listed[0], n_dp)
    # Everything else an analyst reads is the same as the owner's view.
    mine = client.get(f"/v1/datasets/{owner['id']}", headers=auth(keys["owner"])).json()
    assert mine["n_rows"] == 300
    assert {**mine, "n_rows": None} == {**got, "n_rows": None}
    # The k check quotes the released count, not N.
    top = max(n_dp, 1)
    est = client.post(
        f"/v1/datasets/{owner['id']}/jobs/estimate", headers=h, json={"k": top, "epsilon": 0.5}
    )
    assert est.status_code == 200, est.json()
    over = client.post(
        f"/v1/datasets/{owner['id']}/jobs/estimate", headers=h, json={"k": top + 1, "epsilon": 0.5}
    )
    assert over.status_code == 422 and over.json()["field"] == "k"
    assert f"n_rows_dp, the released row count ({top})" in over.json()["detail"]
    # The owner's delete answers with the owner's view.
    deleted = client.delete(f"/v1/datasets/{owner['id']}", headers=auth(keys["owner"])).json()
    assert deleted["n_rows"] == 300
    assert _is_analyst_view(client.get(f"/v1/datasets/{owner['id']}", headers=h).json(), n_dp)


def test_a_declared_public_count_is_not_released_and_is_replace_one(
    client: TestClient, keys
) -> None:
    up = upload(client, keys["owner"], csv_bytes(two_blobs()), count_public="true")
    assert up["status"] == 201, up
    ds = up["body"]
    assert (ds["n_rows"], ds["n_rows_dp"], ds["count_mu"]) == (300, 300, None)
    assert ds["count_public"] is True and ds["relation"] == "replace-one"
    assert ds["budget"]["mu_spent"] == 0.0
    assert ds["budget"]["mu_remaining"] == pytest.approx(ds["budget"]["mu_cap"])
    h = auth(keys["analyst"])
    assert _is_analyst_view(client.get(f"/v1/datasets/{ds['id']}", headers=h).json(), 300)
    entries = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=h).json()["entries"]
    assert [e["kind"] for e in entries] == ["cap"]
    # k may go up to the public N exactly.
    ok = client.post(
        f"/v1/datasets/{ds['id']}/jobs/estimate", headers=h, json={"k": 300, "epsilon": 0.5}
    )
    assert ok.status_code == 200, ok.json()
    over = client.post(
        f"/v1/datasets/{ds['id']}/jobs/estimate", headers=h, json={"k": 301, "epsilon": 0.5}
    )
    assert over.status_code == 422 and over.json()["field"] == "k"


def test_the_owner_may_choose_the_count_cost(client: TestClient, keys) -> None:
    up = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=2.0, count_mu="0.2")
    assert up["status"] == 201, up
    ds = up["body"]
    assert ds["count_mu"] == 0.2 and ds["budget"]["mu_spent"] == pytest.approx(0.2)
    entries = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["owner"])).json()[
        "entries"
    ]
    assert [(e["kind"], e["mu"]) for e in entries][1] == ("count", 0.2)
    assert entries[1]["sigma"] == pytest.approx(5.0)
    # The cap can never go below what the count spent.
    r = client.patch(
        f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"]), json={"epsilon": 0.5}
    )
    assert r.status_code == 422 and r.json()["field"] == "epsilon", r.json()
    assert r.json()["mu_used"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "extra",
    [
        {"count_mu": "0"},
        {"count_mu": "-0.1"},
        {"count_mu": "nan"},
        {"count_mu": "inf"},
        {"count_mu": "0.45"},  # not below mu_cap = 0.448 (epsilon 2, delta 1e-6)
        {"count_mu": "1e-20"},  # noise of std 1e20: too small a cost to release
        {"count_mu": "0.01", "count_public": "true"},
    ],
)
def test_bad_count_options_are_422_and_leave_nothing(client, keys, settings, extra) -> None:
    up = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=2.0, **extra)
    assert up["status"] == 422, up
    assert up["body"]["code"] == "invalid-parameter" and up["body"]["field"] == "count_mu"
    assert stored_files(settings) == []


def test_a_delta_above_one_over_the_released_count_is_flagged(client, keys) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()), delta=0.1)["body"]
    assert len(ds["warnings"]) == 1 and "1/n_rows_dp" in ds["warnings"][0]
    got = client.get(f"/v1/datasets/{ds['id']}", headers=auth(keys["analyst"])).json()
    assert got["warnings"] == ds["warnings"]


@pytest.mark.parametrize(("lower", "upper"), [("[-3, -4]", "[3, 4]"), ("-3,-4", " 3, 4 ")])
def test_box_domain_gives_center_radius_and_its_bounds(
    client: TestClient, keys, lower: str, upper: str
) -> None:
    # A JSON array or comma-separated numbers alike.
    up = upload(
        client, keys["owner"], csv_bytes(two_blobs()), radius=None, lower=lower, upper=upper
    )
    assert up["status"] == 201, up
    assert up["body"]["domain"] == {
        "center": [0.0, 0.0],
        "radius": 5.0,
        "kind": "box",
        "lower": [-3.0, -4.0],
        "upper": [3.0, 4.0],
    }


@pytest.mark.parametrize(
    ("data", "code", "row", "column"),
    [
        (b"a,b\n1,2\n3,x\n", "non-numeric-value", 2, "b"),
        (b"a,b\n1,2\nnan,1\n", "non-finite-value", 2, "a"),
        (b"a,b\n1,2\n1,2,3\n", "ragged-row", 2, None),
        (b"a,b\n", "empty-dataset", None, None),
        (b"PK\x03\x04\x00\x00binary spreadsheet", "invalid-file", None, None),
    ],
)
def test_bad_files_are_400_and_leave_nothing(
    client, keys, settings, data, code, row, column
) -> None:
    up = upload(client, keys["owner"], data)
    assert up["status"] == 400, up
    assert up["ctype"].startswith("application/problem+json")
    assert up["body"]["code"] == code
    if row is not None:
        assert up["body"]["row"] == row
    if column is not None:
        assert up["body"]["column"] == column
    assert stored_files(settings) == []
    assert client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"] == []


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"radius": "0"}, "radius"),
        ({"radius": "1", "center": "[0]"}, "center"),
        ({}, "radius"),
        ({"radius": "1", "lower": "[0,0]", "upper": "[1,1]"}, "radius"),
        ({"radius": "1", "center": "not json"}, "center"),
        # Centring a row near +1.5e308 on this domain would overflow: refused up front.
        ({"radius": "1", "center": "[-1e308, 0]"}, "center"),
        ({"radius": "1e101"}, "radius"),
        ({"lower": "[-1e101, 0]", "upper": "[0, 1]"}, "lower"),
    ],
)
def test_bad_domains_are_422_and_leave_nothing(client, keys, settings, form, field) -> None:
    domain = {"radius": None, **form}  # the case's domain fields only
    r = upload(
        client, keys["owner"], csv_bytes(two_blobs()), name="x", filename="d.csv",
        epsilon="1", delta="1e-6", **domain,
    )  # fmt: skip
    assert r["status"] == 422, r["body"]
    assert r["body"]["code"] == "invalid-parameter" and r["body"]["field"] == field
    assert stored_files(settings) == []


@pytest.mark.parametrize(
    ("epsilon", "delta", "field"),
    [
        ("0", "1e-6", "epsilon"),
        ("-1", "1e-6", "epsilon"),
        ("nan", "1e-6", "epsilon"),
        ("1", "1", "delta"),
        ("1", "0", "delta"),
        ("abc", "1e-6", "epsilon"),
    ],
)
def test_bad_dataset_budgets_are_422(client, keys, settings, epsilon, delta, field) -> None:
    r = upload(
        client, keys["owner"], csv_bytes(two_blobs()), name="x", filename="d.csv",
        epsilon=epsilon, delta=delta, radius="1",
    )  # fmt: skip
    assert r["status"] == 422
    assert r["body"]["field"] == field
    assert stored_files(settings) == []


def test_upload_wrong_content_type_is_415(client, keys) -> None:
    r = client.post("/v1/datasets", headers=auth(keys["owner"]), json={"name": "x"})
    assert r.status_code == 415 and r.json()["code"] == "unsupported-media-type"


def test_upload_over_the_limit_is_413(client, keys, settings) -> None:
    settings.max_upload_bytes = 100
    up = upload(client, keys["owner"], csv_bytes(two_blobs(1000)))
    assert up["status"] == 413 and up["body"]["code"] == "too-large"
    assert stored_files(settings) == []


def test_npy_upload(client, keys) -> None:
    buf = io.BytesIO()
    np.save(buf, two_blobs(50, 3))
    up = upload(client, keys["owner"], buf.getvalue(), filename="x.npy")
    assert up["status"] == 201, up
    assert up["body"]["columns"] == ["x0", "x1", "x2"]


def test_analysts_cannot_upload_delete_or_change_budgets(client, keys) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    assert upload(client, keys["analyst"], csv_bytes(two_blobs()))["status"] == 403
    assert (
        client.delete(f"/v1/datasets/{ds['id']}", headers=auth(keys["analyst"])).status_code == 403
    )
    assert (
        client.patch(
            f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["analyst"]), json={"epsilon": 9}
        ).status_code
        == 403
    )


def test_other_tenants_get_404_never_403(client, keys) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    other = auth(keys["other_owner"])
    for path in (
        f"/v1/datasets/{ds['id']}",
        f"/v1/datasets/{ds['id']}/budget",
        f"/v1/datasets/{ds['id']}/ledger",
    ):
        r = client.get(path, headers=other)
        assert r.status_code == 404, path
    r = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=other, json={"k": 2, "epsilon": 1})
    assert r.status_code == 404
    assert client.get("/v1/datasets", headers=other).json()["items"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"k": 2, "epsilon": 0}, "epsilon"),
        ({"k": 2, "epsilon": -1}, "epsilon"),
        ({"k": 2, "epsilon": "abc"}, "epsilon"),
        ({"k": 2, "epsilon": 1, "delta": 1}, "delta"),
        ({"k": 2}, "epsilon"),
        ({"k": 2, "epsilon": 1, "mu": 1}, "epsilon"),
        ({"k": 5000, "epsilon": 1}, "k"),  # far above the released count of 300 rows
        ({"k": 10**9, "epsilon": 1}, "k"),
        ({"k": 2, "epsilon": 1, "algorithm": "dbscan"}, "algorithm"),
        ({"k": 2, "epsilon": 1, "params": {"iterations": 0}}, "params.iterations"),
    ],
)
def test_bad_job_parameters_are_422_and_charge_nothing(client, keys, body, field) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    r = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 422, r.json()
    assert r.json()["code"] == "invalid-parameter"
    assert r.json()["field"] == field
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["jobs"] == 0 and budget["mu_reserved"] == 0.0
    assert budget["mu_spent"] == pytest.approx(ds["count_mu"])


def test_nan_in_json_body_is_rejected(client, keys) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers={**auth(keys["analyst"]), "content-type": "application/json"},
        content=b'{"k": 2, "epsilon": NaN}',
    )
    assert r.status_code == 422 and r.json()["field"] == "epsilon"


def test_submit_estimate_budget_exceeded_idempotency_and_cancel(client, keys, settings) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=1.0, delta=1e-6)["body"]
    h = auth(keys["analyst"])
    est = client.post(
        f"/v1/datasets/{ds['id']}/jobs/estimate", headers=h, json={"k": 2, "epsilon": 0.5}
    ).json()
    assert est["admissible"] and est["algorithm"] == "pe-lloyd"  # auto at d = 2
    assert est["budget_after"]["mu_reserved"] == pytest.approx(est["privacy"]["mu"])
    # How long it will run: a figure inside its range, in process (no Dask configured), and
    # longer for more centres on the same rows.
    took = est["duration"]
    assert took["engine"] == "local" and 0 < took["low"] < took["seconds"] < took["high"]
    longer = client.post(
        f"/v1/datasets/{ds['id']}/jobs/estimate", headers=h, json={"k": 4, "epsilon": 0.5}
    ).json()["duration"]
    assert longer["seconds"] > took["seconds"]
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers={**h, "Idempotency-Key": "abc"},
        json={"k": 2, "epsilon": 0.5},
    )
    assert r.status_code == 202, r.json()
    job = r.json()
    assert job["status"] == "queued" and job["privacy"]["mu"] == est["privacy"]["mu"]
    # pe-lloyd: floor(4 sqrt(2)) = 5 vote histograms and a Lloyd step priced as 1 release.
    assert job["privacy"]["iterations"] == 6
    again = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers={**h, "Idempotency-Key": "abc"},
        json={"k": 2, "epsilon": 0.5},
    )
    assert again.status_code == 202 and again.json()["id"] == job["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    clash = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers={**h, "Idempotency-Key": "abc"},
        json={"k": 3, "epsilon": 0.5},
    )
    assert clash.status_code == 409 and clash.json()["code"] == "idempotency-key-reused"
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=h).json()
    assert budget["jobs"] == 1
    over = client.post(f"/v1/datasets/{ds['id']}/jobs", headers=h, json={"k": 2, "epsilon": 5})
    assert over.status_code == 409
    problem = over.json()
    assert problem["code"] == "budget-exceeded"
    assert set(problem) >= {"mu_requested", "mu_remaining", "epsilon_remaining", "mu_cap"}
    # The sentence speaks epsilon beside mu, both what the job needs and what remains.
    assert "(epsilon=5)" in problem["detail"]
    assert f"(epsilon={problem['epsilon_remaining']:.4g} at delta=" in problem["detail"]
    # The job sits in its tenant's queue under its own id.
    from app.kit import queue

    rq_job = queue.tenant_queue(settings, "acme").fetch_job(job["id"])
    assert rq_job is not None
    assert list(rq_job.args) == [job["id"]]
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=h)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=h).json()
    assert budget["mu_reserved"] == 0.0 and budget["mu_spent"] == pytest.approx(ds["count_mu"])
    kinds = [
        e["kind"]
        for e in client.get(f"/v1/datasets/{ds['id']}/ledger", headers=h).json()["entries"]
    ]
    assert kinds == ["cap", "count", "reserve", "refund", "cancelled"]
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=h).status_code == 409


def test_redis_down_means_503_and_nothing_charged(client, keys, settings) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    settings.redis_url = "redis://127.0.0.1:1/0"
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers=auth(keys["analyst"]),
        json={"k": 2, "epsilon": 0.5},
    )
    assert r.status_code == 503 and r.json()["code"] == "queue-unavailable"
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["jobs"] == 0
    assert client.get("/readyz").status_code == 503


def test_a_lost_enqueue_reply_after_a_worker_took_the_job_is_no_refund(
    client, keys, settings, monkeypatch
) -> None:
    # Redis accepted the job and a worker started it, but the enqueue's reply was lost: the job
    # is not failed or refunded (its noise may be drawn already), and the client is told it was
    # admitted, not that its budget came back.
    from app.jobs import repository as jobs_repo
    from app.kit import queue
    from app.kit.db.session import session_scope

    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]

    def enqueue_then_lose_the_reply(settings_, job_id, tenant=None) -> None:
        with session_scope(settings.resolved_database_url) as s:
            assert jobs_repo.transition_job(s, job_id, from_status="queued", status="running")
        raise ConnectionError("reply lost")

    monkeypatch.setattr(queue, "enqueue_job", enqueue_then_lose_the_reply)
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "mu": 0.2}
    )
    assert r.status_code == 202 and r.json()["status"] == "running"
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["jobs"] == 1 and budget["mu_reserved"] == pytest.approx(0.2)


def test_the_queue_check_holds_no_database_connection(client, keys, monkeypatch) -> None:
    # The submit route pings Redis before it charges anything; a ping may wait for its socket
    # timeout (10 s), and meanwhile no database connection may be held: no PostgreSQL session
    # idle in a transaction, no SQLite read snapshot keeping the WAL from checkpointing.
    from redis import Redis

    from app.kit.db import session as db_session

    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    held: list[int] = []
    real_ping = Redis.ping

    def ping(self, **kwargs):
        held.append(sum(engine.pool.checkedout() for engine in db_session._engines.values()))
        return real_ping(self, **kwargs)

    monkeypatch.setattr(Redis, "ping", ping)
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers=auth(keys["analyst"]),
        json={"k": 2, "epsilon": 0.5},
    )
    assert r.status_code == 202
    assert held == [0]


def test_budget_patch_is_audited(client, keys) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=1.0)["body"]
    r = client.patch(
        f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"]), json={"epsilon": 3.0}
    )
    assert r.status_code == 200 and r.json()["epsilon"] == 3.0
    assert r.json()["mu_cap"] > ds["budget"]["mu_cap"]
    entries = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["owner"])).json()[
        "entries"
    ]
    assert [e["kind"] for e in entries] == ["cap", "count", "cap"]


def test_pagination_walks_every_dataset_once(client, keys) -> None:
    ids = {upload(client, keys["owner"], csv_bytes(two_blobs(20)))["body"]["id"] for _ in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/datasets", headers=auth(keys["owner"]), params=params).json()
        seen += [d["id"] for d in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    bad = client.get("/v1/datasets", headers=auth(keys["owner"]), params={"cursor": "zz"})
    assert bad.status_code == 422


def test_delete_removes_rows_but_keeps_ledger(client, keys, settings) -> None:
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()))["body"]
    r = client.delete(f"/v1/datasets/{ds['id']}", headers=auth(keys["owner"]))
    assert r.status_code == 200 and r.json()["deleted_at"]
    assert stored_files(settings) == []
    assert (
        client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["owner"])).status_code
        == 200
    )
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs",
        headers=auth(keys["analyst"]),
        json={"k": 2, "epsilon": 0.5},
    )
    assert r.status_code == 409 and r.json()["code"] == "dataset-deleted"


def test_cors_is_off_by_default_and_configurable(settings) -> None:
    from app.main import create_app

    with TestClient(create_app(settings)) as c:
        r = c.options(
            "/v1/datasets",
            headers={"Origin": "https://dash.example", "Access-Control-Request-Method": "GET"},
        )
        assert "access-control-allow-origin" not in r.headers
    settings.cors_origins = ["https://dash.example"]
    with TestClient(create_app(settings)) as c:
        r = c.options(
            "/v1/datasets",
            headers={
                "Origin": "https://dash.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Authorization, Idempotency-Key",
            },
        )
        assert r.headers["access-control-allow-origin"] == "https://dash.example"
        allowed = r.headers["access-control-allow-headers"].lower()
        assert "idempotency-key" in allowed and "authorization" in allowed


def test_openapi_operation_ids_read_well(client) -> None:
    spec = client.get("/openapi.json").json()
    ops = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {
        "datasets_create",
        "datasets_get",
        "jobs_create",
        "jobs_get",
        "jobs_cancel",
        "budget_get",
        "keys_create",
    } <= ops
    for path in spec["paths"].values():
        for op in path.values():
            assert "200" in op["responses"] or "201" in op["responses"] or "202" in op["responses"]


def test_unknown_job_id_is_404(client, keys) -> None:
    r = client.get(f"/v1/jobs/{uuid.uuid4()}", headers=auth(keys["analyst"]))
    assert r.status_code == 404 and r.json()["code"] == "job-not-found"
    assert json.loads(r.content)["type"].endswith("job-not-found")


def test_database_down_means_503_and_readyz_names_it(settings, keys) -> None:
    from app.main import create_app

    settings.database_url = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"
    with TestClient(create_app(settings)) as c:
        r = c.get("/v1/datasets", headers=auth(keys["owner"]))
        assert r.status_code == 503 and r.json()["code"] == "database-unavailable"
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["failing"] == ["database", "worker"]


def test_an_async_endpoint_cannot_take_an_api_key() -> None:
    # The key is checked where the endpoint runs, in a worker thread: an async endpoint would
    # receive the unchecked claim, so declaring one is an error when the route is built.
    router = APIRouter(route_class=UnitOfWorkRoute)

    async def any_key(key: CurrentKey) -> dict[str, str]:
        return {}

    async def tenant_key(key: TenantKey) -> dict[str, str]:
        return {}

    def plain(key: TenantKey) -> dict[str, str]:
        return {}

    for endpoint in (any_key, tenant_key):
        with pytest.raises(TypeError, match="must be a plain def"):
            router.add_api_route("/x", endpoint)
    router.add_api_route("/y", plain)
