"""Federated jobs: the same releases as the central job on the pooled rows (bit for bit with the
noise fixed), what the coordinator receives looks uniform and holds no member's exact
statistic or count, a job runs through the service end to end with every ledger charged, and a
member that refuses or fails is named."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.coordinator import service as coordinator_service
from app.coordinator.client import TRANSPORTS, MemberAddress
from app.coordinator.rows import FederatedTable
from app.coordinator.service import FederatedJob, Federation
from app.federation import member as member_service
from app.kit.config import Settings
from app.kit.db.session import session_factory
from app.ledger import verify
from privclust.clustering import cluster
from privclust.clustering.data.release import Gaussian, central_release
from privclust.clustering.data.rows import ArrayTable, Reading, Rows, Statistic, WorkingCopy
from privclust.clustering.evolution.variation import Variations
from privclust.federation import passes
from tests.support.api import auth
from tests.support.federation import (
    PARTS,
    budget,
    federated_dataset,
    make_members,
    parsed,
    reachable,
)

pytestmark = pytest.mark.integration

NOISE_SEED, RUN_SEED = 31, 47
DOMAIN = {
    "columns": ["x", "y"], "domain_kind": "ball", "radius": 10.0, "center": [0.0, 0.0],
    "lower": None, "upper": None, "table_spec": None,
}  # fmt: skip


def noise_for(release: int) -> np.random.Generator:
    return np.random.default_rng((NOISE_SEED, release))


class _CentralRows(WorkingCopy):
    """The pooled rows in one place, each release's noise drawn as the fixed members draw it."""

    def __init__(self, points: np.ndarray, log: list) -> None:
        super().__init__(points)
        self.log, self.index = log, 0

    def release(
        self, statistic: Statistic, noises: Sequence[Gaussian], rng: np.random.Generator
    ) -> tuple[np.ndarray, ...]:
        out = central_release(self.total(statistic), noises, noise_for(self.index))
        self.index += 1
        self.log.append(out)
        return out


class _CentralTable(ArrayTable):
    def __init__(self, X: np.ndarray, log: list) -> None:
        super().__init__(X)
        self.log = log

    def rows(self, reading: Reading) -> Rows:
        return _CentralRows(reading.prepare(self.X), self.log)


@pytest.fixture
def fixed_noise() -> Iterator[None]:
    member_service._FIXED_NOISE.append(noise_for)
    yield
    member_service._FIXED_NOISE.clear()


def _calls(members: list[dict[str, Any]], job: str, method: str, mu: float, dtype: str, settings):
    addresses = tuple(
        MemberAddress(i, m["url"], m["dataset"]["id"], m["key"]) for i, m in enumerate(members)
    )
    federation = Federation("fed-test", addresses, tuple(m["public"] for m in members), 0)
    return FederatedJob(federation, job, method, mu, dtype, DOMAIN, settings)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "dtype"),
    [("fastlloyd", "float64"), ("pe-means", "float32"), ("pe-lloyd", "float32")],
)
def test_a_federated_run_makes_the_central_runs_releases_bit_for_bit(
    client: TestClient,
    keys: dict[str, str],
    settings: Settings,
    fixed_noise: None,
    method: str,
    dtype: str,
) -> None:
    members = make_members(client, keys)
    received: list[np.ndarray] = []
    coordinator_service.RECEIVED.append(lambda i, words: received.append(words))
    options: dict[str, Any] = {
        "algorithm": method, "mu": 1.0, "radius": 10.0, "center": np.zeros(2),
        "n_public": 220, "relation": "add-remove",
    }  # fmt: skip
    try:
        with reachable(client, members):
            calls = _calls(members, f"job-{method}", method, 1.0, dtype, settings)
            calls.join()
            federated = cluster(
                FederatedTable(calls, 220, 2), 3, rng=np.random.default_rng(RUN_SEED), **options
            )
            calls.finish(succeeded=True)
            calls.close()
    finally:
        coordinator_service.RECEIVED.clear()
    log: list = []
    pooled = np.concatenate([parsed(p) for p in PARTS])
    central = cluster(_CentralTable(pooled, log), 3, rng=np.random.default_rng(RUN_SEED), **options)
    np.testing.assert_array_equal(federated.centers, central.centers)
    assert len(log) > 0 and len(received) == 3 * len(log)  # every release, from every member


class _Recorder(httpx.BaseTransport):
    """Every response body a member sends the coordinator, recorded."""

    def __init__(self, inner: httpx.BaseTransport, bodies: list[bytes]) -> None:
        self.inner, self.bodies = inner, bodies

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        body = response.read()
        self.bodies.append(body)
        return httpx.Response(response.status_code, headers=response.headers, content=body)


@pytest.mark.slow
def test_a_federated_job_runs_through_the_service_and_no_member_body_holds_its_statistics(
    client: TestClient, keys: dict[str, str], settings: Settings
) -> None:
    from worker.execute import run_job_here

    members = make_members(client, keys, epsilon=20)
    bodies: list[bytes] = []
    with reachable(client, members):
        for m in members:
            TRANSPORTS[m["url"]] = _Recorder(client._transport, bodies)
        dataset = federated_dataset(client, keys["owner"], members)
        jobs = []
        for algorithm in ("fastlloyd", "pe-means", "auto"):
            resp = client.post(
                f"/v1/datasets/{dataset['id']}/jobs",
                headers=auth(keys["analyst"]),
                json={"k": 3, "algorithm": algorithm, "epsilon": 1},
            )
            assert resp.status_code == 202, resp.text
            jobs.append(resp.json()["id"])
            assert run_job_here(jobs[-1]) == "succeeded"
    for job_id, ran in zip(jobs, ("fastlloyd", "pe-means", "pe-lloyd"), strict=True):
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
        assert job["status"] == "succeeded" and job["algorithm"] == ran
        assert len(job["result"]["centers"]) == 3
        # Each member's part, public facts only: every member answered every release.
        releases = job["privacy"]["iterations"]
        assert job["members"] == [
            {"position": i, "status": "finished", "releases": releases} for i in range(3)
        ]
    spent = budget(client, keys["owner"], dataset["id"])["mu_spent"]
    sessions = session_factory(settings.resolved_database_url)
    for m in members:  # each member charged the count and the three jobs, as the coordinator
        assert budget(client, keys["owner"], m["dataset"]["id"])["mu_spent"] >= spent - 1e-6
        found = verify.check(sessions, uuid.UUID(m["dataset"]["id"]))
        assert found is not None and found.agrees and not found.breaks
    # No body a member sent holds its exact row count or any exact statistic it computed:
    # each masked word is one of 2^64 values; the count is looked for as text and as a word.
    text = b"".join(bodies)
    for part in PARTS:
        n = len(part)
        assert f'"n_rows":{n}'.encode() not in text and f": {n}".encode() not in text
        word = base64.b64encode(np.array([n], dtype="<i8").tobytes())[:10]
        assert word not in text


class _Requests(httpx.BaseTransport):
    """Every request body the coordinator sends a member, and the answer's size, recorded."""

    def __init__(self, inner: httpx.BaseTransport, log: list[tuple[dict, int]]) -> None:
        self.inner, self.log = inner, log

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        body = response.read()
        if "/releases/" in request.url.path:
            self.log.append((json.loads(request.content), len(body)))
        return httpx.Response(response.status_code, headers=response.headers, content=body)


class _DrawnOtherwise(Variations):
    """A member whose numpy draws one candidate's last bit differently."""

    def population(self) -> np.ndarray:
        out = super().population()
        out[-1, 0] = np.nextafter(out[-1, 0], np.inf)
        return out


@pytest.mark.slow
@pytest.mark.parametrize("drawn_otherwise", [False, True])
def test_a_vote_travels_as_its_recipe_in_32_bit_words_or_whole_to_a_member_that_draws_otherwise(
    client: TestClient,
    keys: dict[str, str],
    settings: Settings,
    fixed_noise: None,
    monkeypatch: pytest.MonkeyPatch,
    drawn_otherwise: bool,
) -> None:
    if drawn_otherwise:
        monkeypatch.setattr(passes, "Variations", _DrawnOtherwise)
    members = make_members(client, keys)
    log: list[tuple[dict, int]] = []
    options: dict[str, Any] = {
        "algorithm": "pe-means", "mu": 1.0, "radius": 10.0, "center": np.zeros(2),
        "n_public": 220, "relation": "add-remove",
    }  # fmt: skip
    with reachable(client, members):
        for m in members:
            TRANSPORTS[m["url"]] = _Requests(client._transport, log)
        calls = _calls(members, "job-votes", "pe-means", 1.0, "float32", settings)
        calls.join()
        federated = cluster(
            FederatedTable(calls, 220, 2), 3, rng=np.random.default_rng(RUN_SEED), **options
        )
        calls.finish(succeeded=True)
        calls.close()
    central = cluster(
        _CentralTable(np.concatenate([parsed(p) for p in PARTS]), []), 3,
        rng=np.random.default_rng(RUN_SEED), **options,
    )  # fmt: skip
    np.testing.assert_array_equal(federated.centers, central.centers)
    assert calls.whole == ({0, 1, 2} if drawn_otherwise else set())
    drawn = [body for body, _ in log if "anchors" in body["pass"]["arrays"]]
    whole = [body for body, _ in log if "candidates" in body["pass"]["arrays"]]
    assert all(body["bits"] == 32 for body, _ in log)  # N~ = 220: every vote in 32-bit words
    assert len(drawn) == (3 if drawn_otherwise else 3 * (calls.releases - 1))
    assert len(whole) == 3 * (calls.releases if drawn_otherwise else 1)  # the packing: whole
    for body, size in log:
        if "candidates" in body["pass"]["arrays"]:
            bins = body["pass"]["arrays"]["candidates"]["shape"][0]
            assert size == len(
                json.dumps(
                    {"release": 0, "words": "x" * (4 * -(-4 * bins // 3))}, separators=(",", ":")
                )
            )
