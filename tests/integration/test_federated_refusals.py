"""A federated job that a member refuses, a method not federated yet, a member that fails
mid-job, two federations racing for one member, and the uniformity of what the coordinator
receives."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from scipy.stats import chisquare

from app.coordinator import service as coordinator_service
from app.coordinator.client import TRANSPORTS, MemberAddress
from app.coordinator.service import FederatedJob, Federation
from app.kit.config import Settings
from privclust.clustering.data.release import Gaussian
from privclust.clustering.evolution.vote import VoteCounts
from tests.support.api import auth
from tests.support.federation import budget, make_members, pooled, reachable

pytestmark = pytest.mark.integration

DOMAIN = {
    "columns": ["x", "y"], "domain_kind": "ball", "radius": 10.0, "center": [0.0, 0.0],
    "lower": None, "upper": None, "table_spec": None,
}  # fmt: skip


def _submit(client: TestClient, analyst: str, dataset_id: str, **body: Any) -> httpx.Response:
    return client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(analyst), json=body)


@pytest.mark.slow
def test_a_member_without_room_refuses_the_job_and_nothing_is_charged_anywhere(
    client: TestClient, keys: dict[str, str]
) -> None:
    with pooled(client, keys, member_epsilon=3, epsilon="40") as (members, dataset):
        ids = [dataset["id"]] + [m["dataset"]["id"] for m in members]
        before = [budget(client, keys["owner"], i) for i in ids]
        resp = _submit(client, keys["analyst"], dataset["id"], k=3, algorithm="fastlloyd", mu=3)
        assert resp.status_code == 409, resp.text
        problem = resp.json()
        assert problem["code"] == "member-refused" and problem["member_code"] == "budget-exceeded"
        assert problem["detail"].startswith("member 0 (http://member-0) refused the job")
        after = [budget(client, keys["owner"], i) for i in ids]
    for b, a in zip(before, after, strict=True):
        assert (a["mu_spent"], a["mu_reserved"]) == (b["mu_spent"], b["mu_reserved"])
    for algorithm in ("hdpe-means", "lsh-coreset"):
        resp = _submit(client, keys["analyst"], dataset["id"], k=3, algorithm=algorithm, mu=0.5)
        assert resp.status_code == 422 and algorithm in resp.json()["detail"], resp.text


class _Dies(httpx.BaseTransport):
    """A member that answers its first `releases` releases, then is gone."""

    def __init__(self, inner: httpx.BaseTransport, releases: int) -> None:
        self.inner, self.left = inner, releases

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "/releases/" in request.url.path:
            if self.left <= 0:
                raise httpx.ConnectError("the member is gone")
            self.left -= 1
        return self.inner.handle_request(request)


@pytest.mark.slow
def test_a_member_that_dies_mid_job_fails_it_charged_and_it_never_runs_again(
    client: TestClient, keys: dict[str, str]
) -> None:
    from worker.execute import run_job_here

    with pooled(client, keys, member_epsilon=20, epsilon="8") as (members, dataset):
        TRANSPORTS[members[2]["url"]] = _Dies(client._transport, releases=2)
        resp = _submit(client, keys["analyst"], dataset["id"], k=3, algorithm="pe-means", mu=1)
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        started = time.monotonic()
        assert run_job_here(job_id) == "failed"
        assert time.monotonic() - started < 60
        assert run_job_here(job_id) == "failed"  # never run again
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "member 2 (http://member-2)" in job["error"]
    assert budget(client, keys["owner"], dataset["id"])["mu_spent"] > 1.0
    for m in members[:2]:  # the members that answered keep the job's charge
        assert budget(client, keys["owner"], m["dataset"]["id"])["mu_spent"] > 1.0


def test_two_federations_racing_for_one_member_never_overspend_it(
    client: TestClient, keys: dict[str, str], settings: Settings
) -> None:
    members = make_members(client, keys, epsilon=5)
    shared = members[0]
    room = budget(client, keys["owner"], shared["dataset"]["id"])["mu_remaining"]
    addresses = tuple(
        MemberAddress(i, m["url"], m["dataset"]["id"], m["key"]) for i, m in enumerate(members)
    )
    publics = tuple(m["public"] for m in members)
    outcomes = []
    with reachable(client, members):
        for attempt in range(3):
            mu = room * 0.75  # each fits alone, two do not: 2 x 0.75^2 > 1
            calls = [
                FederatedJob(
                    Federation(f"fed-{attempt}-{side}", addresses[:1], publics, 0),
                    "job", "fastlloyd", mu, "float64", DOMAIN, settings,
                )
                for side in "ab"
            ]  # fmt: skip
            barrier = Barrier(2)

            def join(job: FederatedJob, barrier: Barrier = barrier) -> bool:
                barrier.wait()
                try:
                    job.join()
                except Exception:
                    return False
                return True

            with ThreadPoolExecutor(2) as pool:
                outcomes.append(list(pool.map(join, calls)))
            for job in calls:
                job.finish(succeeded=False)  # answered nothing: refunded
                job.close()
            assert budget(client, keys["owner"], shared["dataset"]["id"])["mu_reserved"] == 0
    assert all(sorted(o) == [False, True] for o in outcomes), outcomes


def test_the_masked_vectors_the_coordinator_receives_look_uniform(
    client: TestClient, keys: dict[str, str], settings: Settings
) -> None:
    members = make_members(client, keys)
    addresses = tuple(
        MemberAddress(i, m["url"], m["dataset"]["id"], m["key"]) for i, m in enumerate(members)
    )
    federation = Federation("fed-uniform", addresses, tuple(m["public"] for m in members), 0)
    received: list[np.ndarray] = []
    coordinator_service.RECEIVED.append(lambda i, words: received.append(words))
    candidates = np.random.default_rng(3).uniform(-2, 2, size=(4000, 2))
    try:
        with reachable(client, members):
            job = FederatedJob(federation, "job", "pe-means", 1.0, "float32", DOMAIN, settings)
            job.join()
            job.release(VoteCounts(candidates, None), [Gaussian(1.0, 2.0)])
            job.finish(succeeded=True)
            job.close()
    finally:
        coordinator_service.RECEIVED.clear()
    words = np.concatenate(received)
    assert words.size >= 10_000
    # Each of the 8 bytes of every word, over 256 cells: a vote histogram of at most 75 rows
    # per member would put nearly every word's high bytes in one cell if it were not masked.
    for byte in range(8):
        cells = ((words >> np.uint64(8 * byte)) & np.uint64(0xFF)).astype(np.int64)
        # p > 1e-5 for each of the 8 bytes: a chance failure in under 1 of 10,000 runs.
        assert chisquare(np.bincount(cells, minlength=256)).pvalue > 1e-5


def test_a_federated_job_cancelled_while_queued_is_refunded_on_every_member(
    client: TestClient, keys: dict[str, str]
) -> None:
    with pooled(client, keys, member_epsilon=20, epsilon="8") as (members, dataset):
        resp = _submit(client, keys["analyst"], dataset["id"], k=3, algorithm="fastlloyd", mu=1)
        assert resp.status_code == 202, resp.text
        reserved = budget(client, keys["owner"], members[0]["dataset"]["id"])["mu_reserved"]
        assert reserved > 0.99
        job_id = resp.json()["id"]
        done = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth(keys["analyst"]))
        assert done.status_code == 200 and done.json()["status"] == "cancelled", done.text
    for m in members:
        assert budget(client, keys["owner"], m["dataset"]["id"])["mu_reserved"] == 0.0
