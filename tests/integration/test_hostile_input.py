"""Requests from a careless or hostile client: wrong JSON types, absurd sizes, races, extremes.

Each request either succeeds or changes nothing, and every answer is a documented problem.
"""

from __future__ import annotations

import math
import sys
import threading
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from app.kit.db.session import session_factory
from app.ledger import verify
from tests.support.api import auth, upload
from tests.support.data import csv_bytes, two_blobs
from tests.support.db import make_dataset, stored_files

pytestmark = pytest.mark.integration

HUGE = sys.float_info.max  # 1.7976931348623157e308


def _budget(client: TestClient, key: str, dataset_id: object) -> dict:
    r = client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(key))
    assert r.status_code == 200, r.text
    return r.json()


def _ledger_kinds(client: TestClient, key: str, dataset_id: object) -> list[str]:
    r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key))
    assert r.status_code == 200, r.text
    return [e["kind"] for e in r.json()["entries"]]


# --- strict JSON types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"k": True, "epsilon": 1.0}, "k"),
        ({"k": "2", "epsilon": 1.0}, "k"),
        ({"k": 2, "epsilon": "1.0"}, "epsilon"),
        ({"k": 2, "epsilon": True}, "epsilon"),
        ({"k": 2, "mu": "0.5"}, "mu"),
        ({"k": 2, "epsilon": 1.0, "delta": "1e-6"}, "delta"),
        ({"k": 2, "epsilon": 1.0, "params": {"iterations": True}}, "params.iterations"),
        ({"k": 2, "epsilon": 1.0, "params": {"variations": "3"}}, "params.variations"),
    ],
)
@pytest.mark.parametrize("route", ["jobs", "jobs/estimate"])
def test_job_bodies_take_no_coerced_types_and_charge_nothing(
    settings, client, keys, body, field, route
) -> None:
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, n_rows=500)
    r = client.post(f"/v1/datasets/{ds}/{route}", headers=auth(keys["analyst"]), json=body)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["field"]) == ("invalid-parameter", field)
    assert _budget(client, keys["owner"], ds)["jobs"] == 0
    assert _ledger_kinds(client, keys["owner"], ds) == ["cap"]


def test_json_numbers_may_be_integers(settings, client, keys) -> None:
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, n_rows=500)
    r = client.post(
        f"/v1/datasets/{ds}/jobs/estimate",
        headers=auth(keys["analyst"]),
        json={"k": 2, "epsilon": 1, "delta": 1e-6},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epsilon": "5"}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"epsilon": 5, "delta": "0.1"}, "delta"),
    ],
)
def test_budget_patch_takes_no_coerced_types(settings, client, keys, body, field) -> None:
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, epsilon=3.0)
    r = client.patch(f"/v1/datasets/{ds}/budget", headers=auth(keys["owner"]), json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert _ledger_kinds(client, keys["owner"], ds) == ["cap"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"tenant": 7, "role": "owner"}, "tenant"), ({"tenant": "x", "role": True}, "role")],
)
def test_key_creation_takes_no_coerced_types(client, keys, body, field) -> None:
    before = client.get("/v1/api-keys", headers=auth(keys["admin"])).json()["items"]
    r = client.post("/v1/api-keys", headers=auth(keys["admin"]), json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    after = client.get("/v1/api-keys", headers=auth(keys["admin"])).json()["items"]
    assert len(after) == len(before)


def test_the_schema_says_integers_and_numbers(client) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    k = schemas["JobCreate"]["properties"]["k"]
    assert k["type"] == "integer"
    # Optional since a PATCH may change the pace alone: a number, or null for "unchanged".
    eps = schemas["BudgetPatch"]["properties"]["epsilon"]
    assert [s["type"] for s in eps["anyOf"]] == ["number", "null"]


# --- the planner's limits ----------------------------------------------------------------------


@pytest.mark.parametrize("route", ["jobs", "jobs/estimate"])
def test_a_k_whose_population_cannot_fit_is_422_and_charges_nothing(
    settings, client, keys, route
) -> None:
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, n_rows=50_000)
    r = client.post(
        f"/v1/datasets/{ds}/{route}",
        headers=auth(keys["analyst"]),
        json={"k": 10_000, "epsilon": 1.0},
    )
    assert r.status_code == 422, r.text
    problem = r.json()
    assert (problem["code"], problem["field"]) == ("invalid-parameter", "k")
    assert "1638" in problem["detail"]
    assert _budget(client, keys["owner"], ds)["jobs"] == 0
    assert _ledger_kinds(client, keys["owner"], ds) == ["cap"]


def test_a_huge_epsilon_plans_at_most_256_iterations(settings, client, keys) -> None:
    from privclust.privacy.budget import cap_from_epsilon_delta

    ds = make_dataset(
        settings.resolved_database_url,
        mu_cap=cap_from_epsilon_delta(1e7, 1e-6),
        epsilon=1e7,
        n_rows=5_000,
    )
    r = client.post(
        f"/v1/datasets/{ds}/jobs/estimate",
        headers=auth(keys["analyst"]),
        json={"k": 3, "epsilon": 1e6, "algorithm": "pe-means"},
    )
    assert r.status_code == 200, r.text
    est = r.json()
    assert est["admissible"] and est["algorithm"] == "pe-means"
    assert est["privacy"]["iterations"] == 256
    assert _budget(client, keys["owner"], ds)["jobs"] == 0


# --- one Idempotency-Key, many concurrent submissions ------------------------------------------


class _Racers:
    """n threads, each with its own HTTP client (and event loop), that post the same request at
    the same moment when told to."""

    def __init__(self, app: object, n: int) -> None:
        self.app, self.n = app, n
        self.start = threading.Barrier(n + 1)
        self.done = threading.Barrier(n + 1)
        self.request: tuple[str, dict, dict] | None = None
        self.answers: list[tuple[int, str, str | None]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        with TestClient(self.app) as own:  # type: ignore[arg-type]
            while True:
                self.start.wait()
                if self.request is None:
                    return
                url, headers, body = self.request
                r = own.post(url, headers=headers, json=body)
                with self.lock:
                    self.answers.append(
                        (
                            r.status_code,
                            r.json().get("id", r.text),
                            r.headers.get("Idempotent-Replayed"),
                        )
                    )
                self.done.wait()

    def post(self, url: str, headers: dict, body: dict) -> list[tuple[int, str, str | None]]:
        self.answers, self.request = [], (url, headers, body)
        self.start.wait(60)
        self.done.wait(60)
        return self.answers

    def stop(self) -> None:
        self.request = None
        self.start.wait(60)
        for t in self.threads:
            t.join(60)


def test_concurrent_submissions_with_one_key_all_replay_one_job(settings, keys) -> None:
    """16 clients send the same body with the same key at once, 20 times over: every answer is
    202 with the one job, and the budget (room for a single job) is charged once.

    Before the key was re-checked under the dataset's lock, the requests that lost the race
    for the lock answered 409 budget-exceeded on Postgres instead of replaying the job.
    """
    from app.main import create_app

    app = create_app(settings)
    body = {"k": 2, "mu": 0.8}  # the cap is 1.0: a second charge can never fit
    racers = _Racers(app, 16)
    try:
        with TestClient(app) as client:
            for round_ in range(20):
                ds = make_dataset(settings.resolved_database_url, mu_cap=1.0, n_rows=500)
                headers = {**auth(keys["analyst"]), "Idempotency-Key": f"race-{round_}"}
                answers = racers.post(f"/v1/datasets/{ds}/jobs", headers, body)
                assert len(answers) == 16
                assert {status for status, _, _ in answers} == {202}, answers
                assert len({job for _, job, _ in answers}) == 1, answers
                assert sum(replayed is None for _, _, replayed in answers) == 1, answers
                budget = _budget(client, keys["owner"], ds)
                assert budget["jobs"] == 1 and budget["mu_reserved"] == pytest.approx(0.8)
                assert _ledger_kinds(client, keys["owner"], ds) == ["cap", "reserve"]
                check = verify.check(session_factory(settings.resolved_database_url), ds)
                assert check is not None and check.agrees, check
    finally:
        racers.stop()


# --- numbers at the edge of the float range ----------------------------------------------------


def _reads_all_answer(client: TestClient, keys: dict[str, str], dataset_id: object) -> None:
    for role in ("owner", "analyst"):
        h = auth(keys[role])
        listing = client.get("/v1/datasets", headers=h)
        assert listing.status_code == 200, listing.text
        for item in listing.json()["items"]:
            assert all(math.isfinite(v) for v in item["budget"].values())
        for path in ("", "/budget", "/ledger"):
            r = client.get(f"/v1/datasets/{dataset_id}{path}", headers=h)
            assert r.status_code == 200, (path, r.text)


def test_a_cap_at_the_top_of_the_float_range_is_saved_whole_or_not_at_all(
    settings, client, keys
) -> None:
    """PATCH to epsilon 1.7976931348623157e308 used to answer 500 *and* save the cap, after
    which every read of the dataset, the tenant's list included, answered 500."""
    ds = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=1.0)["body"]
    r = client.patch(
        f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"]), json={"epsilon": HUGE}
    )
    kinds = _ledger_kinds(client, keys["owner"], ds["id"])
    if r.status_code == 200:
        assert kinds == ["cap", "count", "cap"]
        budget = r.json()
        assert budget["epsilon"] == HUGE
        assert 0 < budget["epsilon_remaining"] <= HUGE
    else:
        assert (r.status_code, r.json()["field"]) == (422, "epsilon"), r.text
        assert kinds == ["cap", "count"]
    _reads_all_answer(client, keys, ds["id"])
    r = client.delete(f"/v1/datasets/{ds['id']}", headers=auth(keys["owner"]))
    assert r.status_code == 200, r.text
    _reads_all_answer(client, keys, ds["id"])


def test_an_upload_with_a_huge_epsilon_is_created_whole_or_not_at_all(
    settings, client, keys
) -> None:
    up = upload(client, keys["owner"], csv_bytes(two_blobs()), epsilon=HUGE)
    listing = client.get("/v1/datasets", headers=auth(keys["owner"]))
    assert listing.status_code == 200, listing.text
    if up["status"] == 201:
        assert [d["id"] for d in listing.json()["items"]] == [up["body"]["id"]]
        _reads_all_answer(client, keys, up["body"]["id"])
    else:
        assert (up["status"], up["body"]["field"]) == (422, "epsilon"), up
        assert listing.json()["items"] == []
        assert stored_files(settings) == []


def test_a_stored_budget_beyond_what_epsilon_can_express_still_reads(
    settings, client, keys
) -> None:
    """A cap written before these checks existed (mu_cap 1e200: its epsilon is beyond the
    largest float) must not take down the dataset or the tenant's list."""
    ds = make_dataset(settings.resolved_database_url, mu_cap=1e200, epsilon=HUGE)
    _reads_all_answer(client, keys, ds)
    budget = _budget(client, keys["owner"], ds)
    assert budget["mu_remaining"] == pytest.approx(1e200)
    assert budget["epsilon_remaining"] == HUGE
    est = client.post(
        f"/v1/datasets/{ds}/jobs/estimate",
        headers=auth(keys["analyst"]),
        json={"k": 2, "epsilon": 1e6},
    )
    assert est.status_code == 200, est.text


def test_an_unexpected_error_is_a_problem_document(settings) -> None:
    from app.main import create_app

    app = create_app(settings)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "internal-error"


# --- timestamps --------------------------------------------------------------------------------


def _has_timezone(value: str) -> bool:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).utcoffset() is not None


def test_every_timestamp_carries_its_timezone(settings, client, keys) -> None:
    """RFC 3339 date-times need an offset; on SQLite they used to come back without one."""
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, n_rows=500)
    h = auth(keys["analyst"])
    job = client.post(f"/v1/datasets/{ds}/jobs", headers=h, json={"k": 2, "epsilon": 1.0})
    assert job.status_code == 202, job.text
    client.post(f"/v1/jobs/{job.json()['id']}/cancel", headers=h)
    stamps = [
        *(
            k["created_at"]
            for k in client.get("/v1/api-keys", headers=auth(keys["admin"])).json()["items"]
        ),
        client.get(f"/v1/datasets/{ds}", headers=h).json()["created_at"],
        *(
            e["created_at"]
            for e in client.get(f"/v1/datasets/{ds}/ledger", headers=h).json()["entries"]
        ),
    ]
    got = client.get(f"/v1/jobs/{job.json()['id']}", headers=h).json()
    stamps += [got["created_at"], got["finished_at"]]
    deleted = client.delete(f"/v1/datasets/{ds}", headers=auth(keys["owner"]))
    stamps.append(client.get(f"/v1/datasets/{ds}", headers=h).json()["deleted_at"])
    assert deleted.status_code == 200
    assert len(stamps) >= 8 and all(isinstance(s, str) and _has_timezone(s) for s in stamps), stamps
    # A page cursor made from such a timestamp still walks the list.
    page = client.get("/v1/api-keys", headers=auth(keys["admin"]), params={"limit": 1}).json()
    rest = client.get(
        "/v1/api-keys",
        headers=auth(keys["admin"]),
        params={"limit": 10, "cursor": page["next_cursor"]},
    )
    assert rest.status_code == 200 and len(rest.json()["items"]) == 3


# --- bodies that cannot be parsed --------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("POST", "/v1/api-keys", "admin"),
        ("PATCH", "/v1/datasets/{ds}/budget", "owner"),
        ("POST", "/v1/datasets/{ds}/jobs", "analyst"),
        ("POST", "/v1/datasets/{ds}/jobs/estimate", "analyst"),
    ],
)
@pytest.mark.parametrize("raw", [b"\xff\xfe{", b'{"k": 2'])
def test_an_unparseable_json_body_is_a_422_problem(
    settings, client, keys, method, path, role, raw
) -> None:
    ds = make_dataset(settings.resolved_database_url, mu_cap=2.0, n_rows=500)
    r = client.request(
        method,
        path.format(ds=ds),
        headers={**auth(keys[role]), "content-type": "application/json"},
        content=raw,
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (r.json()["code"], r.json()["field"]) == ("invalid-parameter", "body")
    assert _ledger_kinds(client, keys["owner"], ds) == ["cap"]
