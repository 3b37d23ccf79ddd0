"""Caps per API key and paces per period, through the API on the real database, with a clock
the test moves (tests.support.clock): refusals name the cap and what is left, the pace renews
with the next period, and the lifetime cap still stops spending."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient

from app.kit.config import Settings
from tests.support.api import auth
from tests.support.clock import ManualClock
from tests.support.db import make_dataset

pytestmark = pytest.mark.integration

JOB_MU = 0.3


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 3, 10, 15, 30, tzinfo=UTC))  # a Tuesday


@pytest.fixture
def api(settings: Settings, clock: ManualClock) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(settings, clock)) as c:
        yield c


@pytest.fixture
def team(api: TestClient, keys: dict[str, str]) -> dict[str, dict[str, str]]:
    """The owner and two analysts of tenant acme: each one's secret and key id."""
    admin = auth(keys["admin"])
    made = {
        name: api.post("/v1/api-keys", headers=admin, json={"tenant": "acme", "role": role}).json()
        for name, role in (("owner", "owner"), ("ann", "analyst"), ("bob", "analyst"))
    }
    return {name: {"key": m["key"], "id": m["id"]} for name, m in made.items()}


def _job(api: TestClient, secret: str, dataset: str, mu: float = JOB_MU) -> httpx.Response:
    return api.post(f"/v1/datasets/{dataset}/jobs", headers=auth(secret), json={"k": 2, "mu": mu})


def test_a_key_cap_bounds_that_key_and_names_itself_when_it_refuses(
    api: TestClient, team: dict[str, dict[str, str]], settings: Settings
) -> None:
    dataset = str(make_dataset(settings.resolved_database_url, mu_cap=2.0))
    owner, ann, bob = (auth(team[n]["key"]) for n in ("owner", "ann", "bob"))
    path = f"/v1/datasets/{dataset}/budget/keys/{team['ann']['id']}"
    # What ann spent before the cap counts against it.
    assert _job(api, team["ann"]["key"], dataset).status_code == 202
    assert api.put(path, headers=ann, json={"mu": 0.5}).status_code == 403  # owners only
    put = api.put(path, headers=owner, json={"mu": 0.5})
    assert put.status_code == 200, put.text
    assert put.json()["mu_spent"] == 0.0 and put.json()["mu_reserved"] == pytest.approx(JOB_MU)
    assert _job(api, team["ann"]["key"], dataset).status_code == 202  # sqrt(0.18) < 0.5
    refused = _job(api, team["ann"]["key"], dataset)
    assert refused.status_code == 409
    problem = refused.json()
    assert problem["code"] == "key-budget-exceeded" and problem["cap"] == "key"
    assert problem["key_id"] == team["ann"]["id"] and problem["mu_cap"] == 0.5
    assert problem["mu_remaining"] == pytest.approx(math.sqrt(0.25 - 2 * JOB_MU**2), rel=1e-9)
    assert problem["epsilon_remaining"] > 0
    # An estimate by ann prices the job against her cap too, and charges nothing.
    estimate = api.post(
        f"/v1/datasets/{dataset}/jobs/estimate", headers=ann, json={"k": 2, "mu": 0.1}
    ).json()
    assert estimate["admissible"] and estimate["refused_by"] is None
    left = math.sqrt(0.25 - 2 * JOB_MU**2 - 0.01)
    assert estimate["key_budget_after"]["mu_remaining"] == pytest.approx(left, rel=1e-9)
    estimate = api.post(
        f"/v1/datasets/{dataset}/sweeps/estimate", headers=ann, json={"ks": [2, 3], "mu": 0.5}
    ).json()
    assert not estimate["admissible"] and estimate["refused_by"] == "key"
    assert estimate["key_budget_after"] == estimate["key_budget"]
    sweep = api.post(f"/v1/datasets/{dataset}/sweeps", headers=ann, json={"ks": [2, 3], "mu": 0.5})
    assert (sweep.status_code, sweep.json()["code"]) == (409, "key-budget-exceeded")
    assert "this sweep needs mu=0.5" in sweep.json()["detail"]
    # bob has no cap: he shares what the dataset has left.
    assert _job(api, team["bob"]["key"], dataset, 1.0).status_code == 202
    view = api.get(f"/v1/datasets/{dataset}/budget", headers=bob).json()
    (capped,) = view["keys"]
    assert capped["key_id"] == team["ann"]["id"] and capped["jobs"] == 2
    assert capped["mu_reserved"] == pytest.approx(math.sqrt(2) * JOB_MU)
    # A cap below what the key already spent is refused; lifting it lets ann share again.
    assert api.put(path, headers=owner, json={"mu": 0.1}).status_code == 422
    assert api.delete(path, headers=owner).json()["jobs"] == 2
    assert api.get(path, headers=owner).status_code == 404
    assert _job(api, team["ann"]["key"], dataset).status_code == 202


def test_a_cap_in_epsilon_and_delta_reads_back_and_a_pace_goes_with_it(
    api: TestClient, team: dict[str, dict[str, str]], settings: Settings
) -> None:
    dataset = str(make_dataset(settings.resolved_database_url, mu_cap=2.0))
    owner = auth(team["owner"]["key"])
    path = f"/v1/datasets/{dataset}/budget/keys/{team['bob']['id']}"
    body = {"epsilon": 3.0, "delta": 1e-6, "pace": {"period": "week", "mu": 0.2}}
    put = api.put(path, headers=owner, json=body).json()
    assert put["epsilon"] == 3.0 and put["delta"] == 1e-6 and JOB_MU < put["mu_cap"] < 1
    assert put["pace"]["renews_at"] == "2026-03-16T00:00:00Z"  # the next Monday, UTC
    refused = _job(api, team["bob"]["key"], dataset).json()
    assert refused["code"] == "pace-exceeded" and refused["cap"] == "key-pace"
    for wrong in ({"mu": 1.0, "epsilon": 1.0}, {}, {"mu": 1.0, "delta": 1e-6}):
        assert api.put(path, headers=owner, json=wrong).status_code == 422
    other = f"/v1/datasets/{dataset}/budget/keys/00000000-0000-0000-0000-000000000001"
    assert api.put(other, headers=owner, json={"mu": 1.0}).status_code == 404


def test_a_daily_pace_refuses_with_its_renewal_and_the_lifetime_cap_still_binds(
    api: TestClient, team: dict[str, dict[str, str]], settings: Settings, clock: ManualClock
) -> None:
    dataset = str(make_dataset(settings.resolved_database_url, mu_cap=1.0))
    owner, ann = auth(team["owner"]["key"]), team["ann"]["key"]
    patched = api.patch(
        f"/v1/datasets/{dataset}/budget", headers=owner, json={"pace": {"period": "day", "mu": 0.5}}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["pace"]["renews_at"] == "2026-03-11T00:00:00Z"
    admitted_each_day = []
    last: dict = {}
    for day in range(7):
        admitted = 0
        while (answer := _job(api, ann, dataset)).status_code == 202:
            admitted += 1
        last = answer.json()
        admitted_each_day.append(admitted)
        if last["code"] == "pace-exceeded":
            # 2 jobs of 0.3 compose to 0.42 <= 0.5; a third would make 0.52.
            assert last["cap"] == "dataset-pace" and last["period"] == "day"
            tomorrow = datetime.combine(clock.now().date() + timedelta(days=1), time(0), UTC)
            assert datetime.fromisoformat(last["renews_at"]) == tomorrow
            # It will then allow the pace, or what the lifetime cap leaves if that is less.
            left = math.sqrt(1.0 - 2 * (day + 1) * JOB_MU**2)
            assert last["mu_at_renewal"] == pytest.approx(min(0.5, left), rel=1e-6)
        clock.advance(days=1)
    # Five days of 2 jobs each (0.18 a day) make 0.9; on the sixth, one more fits under the
    # lifetime cap of 1 (0.99) and the next is refused by the cap itself, never renewed.
    assert admitted_each_day == [2, 2, 2, 2, 2, 1, 0]
    assert last["code"] == "budget-exceeded" and last["cap"] == "dataset"
    budget = api.get(f"/v1/datasets/{dataset}/budget", headers=owner).json()
    assert budget["mu_remaining"] < JOB_MU
