"""A federation in one process: members are datasets and member keys on the test's own server,
each reached by the coordinator at its own URL through an in-process transport."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from app.coordinator import client as coordinator_client
from tests.support.api import auth, uploaded

PARTS = [np.random.default_rng(20 + i).normal(0.0, 1.0, size=(60 + 15 * i, 2)) for i in range(3)]


def csv(rows: np.ndarray) -> bytes:
    return ("x,y\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in rows)).encode()


def parsed(rows: np.ndarray) -> np.ndarray:
    """The rows as the server parsed them from the CSV."""
    return np.array([[float(f"{v:.6f}") for v in row] for row in rows])


def make_members(
    client: TestClient, keys: dict[str, str], parts: list[np.ndarray] = PARTS, epsilon: float = 10
) -> list[dict[str, Any]]:
    """A member per part: a dataset (ball of radius 10 around 0) and a member key with its
    seat, reached at http://member-i."""
    out = []
    for i, rows in enumerate(parts):
        dataset = uploaded(client, keys["owner"], csv(rows), epsilon=epsilon)
        made = client.post(
            "/v1/api-keys",
            headers=auth(keys["admin"]),
            json={"tenant": "acme", "role": "member", "dataset_id": dataset["id"]},
        ).json()
        seat = client.get("/v1/federation/seat", headers=auth(made["key"])).json()
        out.append(
            {
                "dataset": dataset,
                "key": made["key"],
                "public": seat["public_key"],
                "fingerprint": seat["fingerprint"],
                "url": f"http://member-{i}",
            }
        )
    return out


@contextmanager
def reachable(client: TestClient, members: list[dict[str, Any]]) -> Iterator[None]:
    """The coordinator reaches each member's URL in this process (the same app)."""
    transport = client._transport  # the TestClient's own in-process transport
    for m in members:
        coordinator_client.TRANSPORTS[m["url"]] = transport
    try:
        yield
    finally:
        coordinator_client.TRANSPORTS.clear()


def members_field(members: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"url": m["url"], "dataset_id": m["dataset"]["id"], "key": m["key"]} for m in members]


def federated_dataset(
    client: TestClient, owner: str, members: list[dict[str, Any]], epsilon: str = "8"
) -> dict[str, Any]:
    """A coordinator's federated dataset (x, y in the ball of radius 10) over `members`."""
    form = {
        "name": "pooled", "epsilon": epsilon, "delta": "1e-6", "radius": "10",
        "columns": "x,y", "members": json.dumps(members_field(members)),
    }  # fmt: skip
    resp = client.post("/v1/datasets", headers=auth(owner), data=form)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


@contextmanager
def pooled(
    client: TestClient, keys: dict[str, str], member_epsilon: float, epsilon: str = "8"
) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Fresh members (each dataset's epsilon `member_epsilon`), reachable, and a coordinator's
    federated dataset over them: (the members, the dataset)."""
    members = make_members(client, keys, epsilon=member_epsilon)
    with reachable(client, members):
        yield members, federated_dataset(client, keys["owner"], members, epsilon=epsilon)


def budget(client: TestClient, owner: str, dataset_id: str) -> dict[str, float]:
    return dict(client.get(f"/v1/datasets/{dataset_id}", headers=auth(owner)).json()["budget"])
