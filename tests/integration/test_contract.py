"""What the OpenAPI document promises matches what the server does, for the cases the contract
run (tests/e2e/test_contract_fuzz.py) found wanting: `Allow` on every 405, 503 documented on
every operation that reads the database, and the constraints the server enforces (a page
cursor, a blank tenant) stated in the schema."""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient

from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, two_blobs

pytestmark = pytest.mark.integration

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)


def test_every_405_names_the_allowed_methods(client: TestClient, keys) -> None:
    """RFC 9110 15.5.6: a 405 carries `Allow`, listing every method of the resource (not only
    those of the route the router tried first: GET and DELETE of a dataset are two routes)."""
    paths = client.get("/openapi.json").json()["paths"]
    checked = 0
    for path, operations in paths.items():
        allowed = {m.upper() for m in operations}
        url = _concrete(path)
        for method in set(METHODS) - allowed:
            r = client.request(method, url, headers=auth(keys["owner"]))
            assert r.status_code == 405, (method, path, r.status_code)
            assert set(r.headers["allow"].split(", ")) == allowed, (method, path, r.headers)
            assert r.headers["content-type"].startswith("application/problem+json")
            checked += 1
    assert checked >= 60
    r = client.request("TRACE", "/healthz")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_every_operation_that_reads_the_database_documents_503(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    missing = [
        f"{method.upper()} {path}"
        for path, operations in paths.items()
        for method, operation in operations.items()
        if path != "/healthz" and "503" not in operation["responses"]
    ]
    assert missing == []


def test_a_cursor_is_a_position_the_schema_describes(client: TestClient, keys) -> None:
    parameters = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]["parameters"]
    (cursor,) = [p for p in parameters if p["name"] == "cursor"]
    pattern = next(s["pattern"] for s in cursor["schema"]["anyOf"] if s.get("type") == "string")
    admin = auth(keys["admin"])
    for _ in range(3):
        client.post("/v1/api-keys", headers=admin, json={"tenant": "acme", "role": "analyst"})
    page = client.get("/v1/api-keys", headers=admin, params={"limit": 2}).json()
    issued = page["next_cursor"]
    assert re.fullmatch(pattern, issued)
    rest = client.get("/v1/api-keys", headers=admin, params={"cursor": issued}).json()
    assert {k["id"] for k in rest["items"]}.isdisjoint(k["id"] for k in page["items"])
    # Any string of that form is a position, issued or not: the keys created before it.
    far_future = f"{10**16 - 1}_{'f' * 32}"
    assert re.fullmatch(pattern, far_future)
    everything = client.get("/v1/api-keys", headers=admin, params={"cursor": far_future})
    assert everything.status_code == 200 and len(everything.json()["items"]) == 7
    before_time = client.get("/v1/api-keys", headers=admin, params={"cursor": f"0_{'0' * 32}"})
    assert before_time.status_code == 200 and before_time.json()["items"] == []
    # Anything else is refused by request validation, as the schema says.
    for bad in ("zz", "eyJ0cyI6IDF9", f"{10**16}_{'0' * 32}", f"1_{'A' * 32}"):
        assert not re.fullmatch(pattern, bad)
        r = client.get("/v1/api-keys", headers=admin, params={"cursor": bad})
        assert r.status_code == 422 and r.json()["field"] == "cursor", bad


@pytest.mark.parametrize("tenant", [" ", "\t\n", "\x1f", "\u3000", " \u2003 "])
def test_a_blank_tenant_is_refused_by_the_schema(client: TestClient, keys, tenant: str) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ApiKeyCreate"]
    pattern = schema["properties"]["tenant"]["pattern"]
    assert not re.search(pattern, tenant)
    r = client.post(
        "/v1/api-keys", headers=auth(keys["admin"]), json={"tenant": tenant, "role": "owner"}
    )
    assert r.status_code == 422 and r.json()["field"] == "tenant"
    assert "errors" in r.json()  # request validation: the schema itself refuses it


def test_a_tenant_with_something_in_it_is_taken_trimmed(client: TestClient, keys) -> None:
    r = client.post(
        "/v1/api-keys", headers=auth(keys["admin"]), json={"tenant": " acme\u3000", "role": "owner"}
    )
    assert r.status_code == 201 and r.json()["tenant"] == "acme"


@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("mu", [1e160, 1.7976931348623157e308])
def test_a_cost_too_large_to_compute_with_is_a_422(
    client: TestClient, keys, summaries: bool, mu: float
) -> None:
    """A schema-valid mu whose square is no float (above about 1.3e154) is refused naming
    `mu`, with or without summaries (whose split of the cost squared it and failed with 500)."""
    ds = uploaded(client, keys["owner"], csv_bytes(two_blobs(300)), epsilon="50")
    for path in ("jobs/estimate", "jobs"):
        r = client.post(
            f"/v1/datasets/{ds['id']}/{path}",
            headers=auth(keys["analyst"]),
            json={"k": 2, "mu": mu, "summaries": summaries},
        )
        assert r.status_code == 422 and r.json()["field"] == "mu", r.text
