"""Member keys on a member's server: made by its admin for one dataset, they reach the seat a
coordinator checks (public metadata and the X25519 public key) and nothing else."""

from __future__ import annotations

import base64
import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings
from privclust.federation import fingerprint
from tests.support.api import auth, uploaded

pytestmark = pytest.mark.integration

ROWS = np.random.default_rng(5).normal(0.0, 1.0, size=(80, 2))
CSV = ("x,y\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in ROWS)).encode()
# Routes any key may call (the caller's own key) or a member key is for.
MEMBER_ROUTES = {("GET", "/v1/me"), ("GET", "/v1/federation/seat")}


def member_key(client: TestClient, admin: str, dataset_id: str, tenant: str = "acme") -> dict:
    resp = client.post(
        "/v1/api-keys",
        headers=auth(admin),
        json={"tenant": tenant, "role": "member", "dataset_id": dataset_id},
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_a_member_key_shows_its_seat_and_public_metadata_only(
    client: TestClient, keys: dict[str, str]
) -> None:
    dataset = uploaded(client, keys["owner"], CSV)
    created = member_key(client, keys["admin"], dataset["id"])
    assert created["role"] == "member" and created["dataset_id"] == dataset["id"]
    resp = client.get("/v1/federation/seat", headers=auth(created["key"]))
    assert resp.status_code == 200, resp.text
    seat = resp.json()
    public = base64.b64decode(seat["public_key"])
    assert len(public) == 32 and seat["fingerprint"] == fingerprint(public)
    shown = seat["dataset"]
    assert shown["id"] == dataset["id"] and shown["columns"] == ["x", "y"]
    assert shown["domain"] == dataset["domain"] and shown["n_rows_dp"] == dataset["n_rows_dp"]
    assert shown["n_rows"] is None  # the exact count is the owner's alone
    # The seat is stable, and another member key (another federation) has a seat of its own.
    again = client.get("/v1/federation/seat", headers=auth(created["key"])).json()
    assert again["public_key"] == seat["public_key"]
    other = member_key(client, keys["admin"], dataset["id"])
    assert (
        client.get("/v1/federation/seat", headers=auth(other["key"])).json()["public_key"]
        != seat["public_key"]
    )
    for role in ("owner", "analyst", "admin"):
        refused = client.get("/v1/federation/seat", headers=auth(keys[role]))
        assert refused.status_code == 403, role


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tenant": "acme", "role": "member"}, "dataset_id"),
        ({"tenant": "acme", "role": "member", "dataset_id": str(uuid.uuid4())}, "dataset_id"),
        ({"tenant": "other", "role": "member", "dataset_id": "{own}"}, "dataset_id"),
        ({"tenant": "acme", "role": "owner", "dataset_id": "{own}"}, "dataset_id"),
    ],
)
def test_a_member_key_needs_one_dataset_of_its_tenant(
    client: TestClient, keys: dict[str, str], body: dict, field: str
) -> None:
    dataset = uploaded(client, keys["owner"], CSV)
    if body.get("dataset_id") == "{own}":
        body = {**body, "dataset_id": dataset["id"]}
    resp = client.post("/v1/api-keys", headers=auth(keys["admin"]), json=body)
    assert resp.status_code == 422, resp.text
    assert field in resp.text


def _requests(client: TestClient) -> list[tuple[str, str]]:
    """Every operation of the API, its path parameters filled with fresh ids."""
    paths = client.get("/openapi.json").json()["paths"]
    found = []
    for path, operations in paths.items():
        filled = path
        while "{" in filled:
            start, stop = filled.index("{"), filled.index("}")
            filled = filled[:start] + str(uuid.uuid4()) + filled[stop + 1 :]
        found += [(method.upper(), filled) for method in operations if method != "parameters"]
    return found


def test_a_member_key_can_call_nothing_but_the_federations_routes(
    client: TestClient, keys: dict[str, str], settings: Settings
) -> None:
    dataset = uploaded(client, keys["owner"], CSV)
    member = member_key(client, keys["admin"], dataset["id"])["key"]
    checked = 0
    for method, path in _requests(client):
        if (method, path) in MEMBER_ROUTES or path.startswith("/v1/federation/jobs"):
            continue  # a member key's own routes (test_federation_member_jobs)
        anonymous = client.request(method, path)
        if anonymous.status_code != 401:
            continue  # a route without a key (health, documentation)
        resp = client.request(method, path, headers=auth(member))
        assert resp.status_code == 403, (method, path, resp.status_code)
        checked += 1
    assert checked > 20
    me = client.get("/v1/me", headers=auth(member)).json()
    assert me["role"] == "member" and me["dataset_id"] == dataset["id"]


def test_a_revoked_member_key_or_a_deleted_dataset_ends_the_seat(
    client: TestClient, keys: dict[str, str]
) -> None:
    dataset = uploaded(client, keys["owner"], CSV)
    kept, revoked = (member_key(client, keys["admin"], dataset["id"]) for _ in range(2))
    client.delete(f"/v1/api-keys/{revoked['id']}", headers=auth(keys["admin"]))
    assert client.get("/v1/federation/seat", headers=auth(revoked["key"])).status_code == 401
    deleted = client.delete(f"/v1/datasets/{dataset['id']}", headers=auth(keys["owner"]))
    assert deleted.status_code == 200, deleted.text
    gone = client.get("/v1/federation/seat", headers=auth(kept["key"]))
    assert gone.status_code == 409 and gone.json()["code"] == "dataset-deleted"
