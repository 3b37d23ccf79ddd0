"""A coordinator's federated dataset: made from 2 to 16 members' datasets, no row stored, its
noisy row count their secure sum, charged here and on every member; a member that refuses is
named and nothing is charged anywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import auth
from tests.support.federation import make_members, members_field, reachable

pytestmark = pytest.mark.integration


def federated(client: TestClient, owner: str, who: list[dict[str, Any]], **extra: Any):
    form = {
        "name": "pooled",
        "epsilon": "4",
        "delta": "1e-6",
        "radius": "10",
        "columns": "x,y",
        "members": json.dumps(members_field(who)),
        **extra,
    }
    return client.post("/v1/datasets", headers=auth(owner), data=form)


def budget(client: TestClient, owner: str, dataset_id: str) -> dict[str, float]:
    return client.get(f"/v1/datasets/{dataset_id}", headers=auth(owner)).json()["budget"]


@pytest.mark.slow
def test_a_federated_dataset_releases_its_count_from_the_members(
    client: TestClient, keys: dict[str, str]
) -> None:
    members = make_members(client, keys)
    with reachable(client, members):
        resp = federated(client, keys["owner"], members)
    assert resp.status_code == 201, resp.text
    made = resp.json()
    assert made["kind"] == "federated" and made["status"] == "ready"
    assert made["n_rows"] is None  # no exact count anywhere on the coordinator
    assert made["n_rows_dp"] is not None and abs(made["n_rows_dp"] - 225) < 60
    assert [m["fingerprint"] for m in made["members"]] == [m["fingerprint"] for m in members]
    assert all(m["key"] not in resp.text for m in members)  # keys are never shown back
    assert made["budget"]["mu_spent"] == pytest.approx(made["count_mu"])
    for m in members:  # every member charged the count on its own ledger
        spent = budget(client, keys["owner"], m["dataset"]["id"])["mu_spent"]
        assert spent > m["dataset"]["budget"]["mu_spent"] + 0.9 * made["count_mu"] ** 2


def test_a_member_that_refuses_is_named_and_nothing_is_charged_anywhere(
    client: TestClient, keys: dict[str, str]
) -> None:
    members = make_members(client, keys, epsilon=10)
    poor = make_members(client, keys, epsilon=0.05)[:1]  # no room for the count
    everyone = [*members[:2], {**poor[0], "url": "http://member-9"}]
    before = [budget(client, keys["owner"], m["dataset"]["id"]) for m in everyone]
    with reachable(client, everyone):
        resp = federated(client, keys["owner"], everyone, epsilon="50")
    assert resp.status_code == 409, resp.text
    problem = resp.json()
    assert problem["code"] == "member-refused" and problem["member"] == 2
    assert "member 2 (http://member-9)" in problem["detail"]
    after = [budget(client, keys["owner"], m["dataset"]["id"]) for m in everyone]
    for b, a in zip(before, after, strict=True):
        assert a["mu_spent"] == b["mu_spent"] and a["mu_reserved"] == 0.0
    listed = client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"]
    assert not any(d["kind"] == "federated" for d in listed)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"columns": "y,x"}, "member-refused"),
        ({"members": "[]"}, "members"),
        ({"colluding": "3"}, "colluding"),
    ],
)
def test_a_federation_that_does_not_fit_is_refused(
    client: TestClient, keys: dict[str, str], extra: dict[str, str], field: str
) -> None:
    members = make_members(client, keys)
    with reachable(client, members):
        resp = federated(client, keys["owner"], members, **extra)
    assert resp.status_code == 422, resp.text
    assert field in resp.text


def test_an_unreachable_member_is_named(client: TestClient, keys: dict[str, str]) -> None:
    members = make_members(client, keys)
    with reachable(client, members[:2]):
        resp = federated(client, keys["owner"], members)
    assert resp.status_code == 422, resp.text
    assert resp.json()["member"] == 2
