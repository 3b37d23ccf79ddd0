"""A member's federated jobs: it joins a job on its own ledger, answers each release with masked
words only (once per release index), never past what it charged, and refunds a job it answered
nothing for. Three members sit on one server here (three datasets, three member keys)."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.federation import member as member_service
from app.keys import service as keys_service
from app.kit.config import Settings
from app.kit.db.session import session_factory, session_scope
from app.ledger import service as ledger_service
from app.ledger import verify
from app.models import MemberAnswer
from privclust.clustering.data.release import Gaussian, central_release
from privclust.clustering.data.rows import ArrayTable, Reading
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lloyd import JointLloydSums, LloydSums
from privclust.federation import Layout, released
from privclust.federation.passes import encode
from privclust.federation.pricing import encode_noises
from tests.support.api import auth
from tests.support.federation import PARTS, make_members, parsed

pytestmark = pytest.mark.integration

SEED = 11


DOMAIN = {
    "columns": ["x", "y"],
    "domain_kind": "ball",
    "radius": 10.0,
    "center": [0.0, 0.0],
    "lower": None,
    "upper": None,
    "table_spec": None,
}


@pytest.fixture
def members(client: TestClient, keys: dict[str, str]) -> list[dict[str, Any]]:
    """Three members: each a dataset (epsilon 10) and a member key with its seat."""
    return make_members(client, keys)


@pytest.fixture
def fixed_noise() -> Iterator[None]:
    member_service._FIXED_NOISE.append(lambda release: np.random.default_rng(SEED))
    yield
    member_service._FIXED_NOISE.clear()


def join_body(members: list[dict[str, Any]], mu: float, job: str = "job-1") -> dict[str, Any]:
    return {
        "federation": "fed-1",
        "job": job,
        "method": "fastlloyd",
        "mu": mu,
        "dtype": "float64",
        "members": [m["public"] for m in members],
        "colluding": 0,
        "domain": DOMAIN,
    }


def joined(client: TestClient, members: list[dict[str, Any]], mu: float, job: str = "job-1"):
    ids = []
    for m in members:
        resp = client.post(
            "/v1/federation/jobs", headers=auth(m["key"]), json=join_body(members, mu, job)
        )
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    return ids


CENTRES = np.array([[-0.5, 0.2], [0.7, -0.1], [0.0, 1.0]])
MULTIPLIER = 9
SENSITIVITY = float(np.hypot(grid_sensitivity(2), MULTIPLIER))
STATISTIC = JointLloydSums(LloydSums(CENTRES, 2.0), MULTIPLIER)


def release_body(sigma: float, sensitivity: float = SENSITIVITY) -> dict[str, Any]:
    return {"pass": encode(STATISTIC), "noises": encode_noises([Gaussian(sensitivity, sigma)])}


def answers(client, members, ids, index: int, body: dict[str, Any]) -> list[np.ndarray]:
    out = []
    for m, job_id in zip(members, ids, strict=True):
        resp = client.post(
            f"/v1/federation/jobs/{job_id}/releases/{index}", headers=auth(m["key"]), json=body
        )
        assert resp.status_code == 200, resp.text
        out.append(np.frombuffer(base64.b64decode(resp.json()["words"]), dtype="<u8"))
    return out


def budget(client: TestClient, owner: str, dataset_id: str) -> dict[str, float]:
    return client.get(f"/v1/datasets/{dataset_id}", headers=auth(owner)).json()["budget"]


def test_a_federated_release_is_the_central_release_of_the_pooled_rows_bit_for_bit(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]], fixed_noise: None
) -> None:
    ids = joined(client, members, mu=0.5)
    messages = answers(client, members, ids, 0, release_body(sigma=4.0))
    pooled = ArrayTable(np.concatenate([parsed(p) for p in PARTS])).rows(
        Reading(radius=10.0, center=np.zeros(2))
    )
    exact = pooled.total(STATISTIC)
    central = central_release(exact, [Gaussian(SENSITIVITY, 4.0)], np.random.default_rng(SEED))
    (federated,) = released(messages, Layout.of(exact), len(members))
    np.testing.assert_array_equal(federated, central[0])
    # What the coordinator received is none of the members' exact statistics.
    for part, message in zip(PARTS, messages, strict=True):
        own = ArrayTable(parsed(part)).rows(Reading(radius=10.0, center=np.zeros(2)))
        assert not np.array_equal(message.view(np.int64), own.total(STATISTIC)[0])
    # Each member's ledger charged the job, the same mu.
    for m in members:
        assert budget(client, keys["owner"], m["dataset"]["id"])["mu_spent"] > 0.5 - 1e-9


def test_a_release_is_answered_once_and_never_past_the_charge(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]]
) -> None:
    ids = joined(client, members, mu=0.5)  # 1/sigma = 0.25: four releases fit, not five
    first = answers(client, members, ids, 0, release_body(sigma=4.0))
    again = answers(client, members, ids, 0, release_body(sigma=4.0))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    m, job_id = members[0], ids[0]
    other = client.post(
        f"/v1/federation/jobs/{job_id}/releases/0",
        headers=auth(m["key"]),
        json=release_body(sigma=5.0),
    )
    assert other.status_code == 409 and other.json()["code"] == "release-taken"
    for index in (1, 2, 3):
        answers(client, members[:1], ids[:1], index, release_body(sigma=4.0))
    past = client.post(
        f"/v1/federation/jobs/{job_id}/releases/4",
        headers=auth(m["key"]),
        json=release_body(sigma=4.0),
    )
    assert past.status_code == 409 and past.json()["code"] == "member-budget-spent"
    # A release that understates its sensitivity costs the member what it really costs:
    # half the sensitivity at sigma 4 is a mu of 0.5, the whole of a fresh job's budget.
    cheap_ids = joined(client, members, mu=0.5, job="job-2")
    ok = answers(client, members[:1], cheap_ids[:1], 0, release_body(4.0, SENSITIVITY / 2))
    assert len(ok) == 1
    refused = client.post(
        f"/v1/federation/jobs/{cheap_ids[0]}/releases/1",
        headers=auth(m["key"]),
        json=release_body(sigma=1e3),
    )
    assert refused.status_code == 409, refused.text


def test_a_member_without_room_refuses_to_join_with_nothing_charged(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]]
) -> None:
    m = members[0]
    before = budget(client, keys["owner"], m["dataset"]["id"])
    resp = client.post(
        "/v1/federation/jobs", headers=auth(m["key"]), json=join_body(members, mu=50.0)
    )
    assert resp.status_code == 409 and resp.json()["code"] == "budget-exceeded", resp.text
    assert budget(client, keys["owner"], m["dataset"]["id"]) == before
    # Two federations that each fit, but not together: the second is refused.
    first = join_body(members, mu=before["mu_remaining"] * 0.6, job="a")
    assert client.post("/v1/federation/jobs", headers=auth(m["key"]), json=first).status_code == 201
    second = join_body(members, mu=before["mu_remaining"] * 0.9, job="b")
    resp = client.post("/v1/federation/jobs", headers=auth(m["key"]), json=second)
    assert resp.status_code == 409, resp.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"domain": {**DOMAIN, "radius": 5.0}}, "domain"),
        ({"domain": {**DOMAIN, "columns": ["y", "x"]}}, "domain"),
        ({"method": "hdpe-means"}, "method"),
        ({"members": "drop-own"}, "members"),
        ({"colluding": 3}, "colluding"),
    ],
)
def test_a_plan_that_does_not_fit_the_member_is_refused(
    client: TestClient,
    keys: dict[str, str],
    members: list[dict[str, Any]],
    change: dict[str, Any],
    field: str,
) -> None:
    body = {**join_body(members, mu=0.5), **change}
    if change.get("members") == "drop-own":
        body["members"] = [m["public"] for m in members[1:]] + [members[1]["public"][::-1]]
    resp = client.post("/v1/federation/jobs", headers=auth(members[0]["key"]), json=body)
    assert resp.status_code == 422, resp.text
    assert field in resp.text


def test_a_job_answered_nothing_is_refunded_and_a_job_answered_stays_charged(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]], settings: Settings
) -> None:
    m = members[0]
    before = budget(client, keys["owner"], m["dataset"]["id"])
    ids = joined(client, members, mu=0.5)
    assert budget(client, keys["owner"], m["dataset"]["id"])["mu_reserved"] > 0.49
    done = client.post(
        f"/v1/federation/jobs/{ids[0]}/finish", headers=auth(m["key"]), json={"succeeded": False}
    )
    assert done.status_code == 200 and done.json()["status"] == "cancelled"  # refunded
    # Everything given back; the ledger still counts the job it admitted.
    after = budget(client, keys["owner"], m["dataset"]["id"])
    assert after == {**before, "jobs": before["jobs"] + 1}
    answers(client, members[1:2], ids[1:2], 0, release_body(sigma=4.0))
    done = client.post(
        f"/v1/federation/jobs/{ids[1]}/finish",
        headers=auth(members[1]["key"]),
        json={"succeeded": True},
    )
    assert done.json()["status"] == "succeeded"
    assert budget(client, keys["owner"], members[1]["dataset"]["id"])["mu_spent"] > 0.5 - 1e-9
    # Both ledgers replay to their running budgets and their chains hold.
    sessions = session_factory(settings.resolved_database_url)
    for m in members[:2]:
        found = verify.check(sessions, uuid.UUID(m["dataset"]["id"]))
        assert found is not None and found.agrees and not found.breaks
    # Other roles cannot reach a member's endpoints.
    for role in ("owner", "analyst"):
        resp = client.post(
            "/v1/federation/jobs", headers=auth(keys[role]), json=join_body(members, 0.5)
        )
        assert resp.status_code == 403


def test_a_release_being_computed_is_not_computed_twice_unless_its_claim_went_stale(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]], settings: Settings
) -> None:
    """A request that finds the release claimed by another (its words not stored yet) is told
    to ask again; a claim whose process died (older than STALE_CLAIM) is taken over."""
    ids = joined(client, members, mu=0.5)
    m, job_id, body = members[0], ids[0], release_body(sigma=4.0)
    with session_scope(settings.resolved_database_url) as s:
        s.add(
            MemberAnswer(
                member_job_id=uuid.UUID(job_id), release=0, attempt="gone", words=b"",
                request_digest=member_service._digest(body | {"bits": 64}), mu_sq="1/16",
            )
        )  # fmt: skip
    url = f"/v1/federation/jobs/{job_id}/releases/0"
    busy = client.post(url, headers=auth(m["key"]), json=body)
    assert busy.status_code == 409 and busy.json()["code"] == "release-in-progress"
    with session_scope(settings.resolved_database_url) as s:
        row = s.get(MemberAnswer, (uuid.UUID(job_id), 0))
        assert row is not None
        row.created_at = row.created_at - member_service.STALE_CLAIM
    taken = client.post(url, headers=auth(m["key"]), json=body)
    assert taken.status_code == 200, taken.text
    again = client.post(url, headers=auth(m["key"]), json=body)
    assert again.json()["words"] == taken.json()["words"]


def test_an_end_waits_for_a_release_being_claimed_and_keeps_its_charge(
    client: TestClient, keys: dict[str, str], members: list[dict[str, Any]], settings: Settings
) -> None:
    """A release's claim and the job's end (`finish`) take the member job's row lock: an end
    that arrives while the first release is being claimed waits, then sees the release and
    keeps the charge. Without the lock (on PostgreSQL, where a budget transaction takes no lock
    at BEGIN) the end read "no release answered", refunded, and the claim then answered the
    release on a refunded reservation."""
    m = members[0]
    job_id = joined(client, members[:2], mu=0.5)[0]
    url = settings.resolved_database_url
    with session_scope(url) as claiming, session_scope(url) as ending:
        key = keys_service.authenticate(claiming, m["key"])
        ledger_service.begin_budget_transaction(claiming)
        job = member_service.member_job(claiming, key, uuid.UUID(job_id))
        ended: list[Any] = []
        end_key = keys_service.authenticate(ending, m["key"])
        waiting = threading.Thread(
            target=lambda: ended.append(
                member_service.finish(ending, end_key, uuid.UUID(job_id), False).status
            )
        )
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive()  # the end waits for the claim's lock
        dataset = member_service._dataset_of(claiming, key)
        member_service._counted(
            claiming, job, dataset, release_body(sigma=4.0), 0, "digest", "attempt"
        )
        claiming.commit()
        waiting.join(timeout=60)
        assert not waiting.is_alive()
    assert ended == ["failed"]  # answered a release: not refunded
    spent = budget(client, keys["owner"], m["dataset"]["id"])
    assert spent["mu_spent"] > 0.5 - 1e-9 and spent["mu_reserved"] < 1e-9
