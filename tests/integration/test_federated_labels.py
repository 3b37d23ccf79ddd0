"""A member's owner downloads labels for its own rows of a federated job: the coordinator sends
the released centres with the end of a job that succeeded, the member labels its own rows by
them, and no one but the member dataset's owner reads them."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.coordinator.client import TRANSPORTS
from tests.support.api import auth
from tests.support.federation import PARTS, federated_dataset, make_members, parsed, reachable

pytestmark = pytest.mark.integration

LISTED = {"id", "federation", "job", "status", "created_at", "finished_at", "labels"}


class _Unreachable(httpx.BaseTransport):
    """A member that joins but cannot be reached for any release: the job fails mid-run."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "/releases/" in request.url.path:
            raise httpx.ConnectError("unreachable", request=request)
        return self.inner.handle_request(request)


def _run(client: TestClient, analyst: str, dataset_id: str) -> tuple[str, str]:
    from worker.execute import run_job_here

    resp = client.post(
        f"/v1/datasets/{dataset_id}/jobs",
        headers=auth(analyst),
        json={"k": 3, "algorithm": "fastlloyd", "epsilon": 1},
    )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    return job_id, run_job_here(job_id)


def _listed(client: TestClient, key: str, dataset_id: str) -> httpx.Response:
    return client.get(f"/v1/datasets/{dataset_id}/federated-jobs", headers=auth(key))


def _nearest_check(rows: np.ndarray, centers: np.ndarray, labels: np.ndarray) -> None:
    """Each label is a nearest centre of its row; where the nearest is ahead of the next by
    more than rounding (1e-9 in squared distance), it is that one."""
    d2 = ((rows[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)
    best = d2.min(axis=1)
    assert labels.shape == (len(rows),)
    assert np.all(d2[np.arange(len(rows)), labels] <= best + 1e-9)
    ordered = np.sort(d2, axis=1)
    clear = ordered[:, 1] - ordered[:, 0] > 1e-9
    np.testing.assert_array_equal(labels[clear], d2.argmin(axis=1)[clear])


@pytest.mark.slow
def test_a_members_owner_downloads_its_own_rows_labels_and_no_one_else_reads_them(
    client: TestClient, keys: dict[str, str]
) -> None:
    members = make_members(client, keys, epsilon=20)
    with reachable(client, members):
        dataset = federated_dataset(client, keys["owner"], members)
        job_id, status = _run(client, keys["analyst"], dataset["id"])
        assert status == "succeeded"
        TRANSPORTS[members[2]["url"]] = _Unreachable(client._transport)
        failed_id, status = _run(client, keys["analyst"], dataset["id"])
        assert status == "failed"
    # The centres as the coordinator's analyst sees them: the ones the member labels by.
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    centers = np.asarray(job["result"]["centers"], dtype=np.float64)
    own = members[0]["dataset"]["id"]

    resp = _listed(client, keys["owner"], own)
    assert resp.status_code == 200, resp.text
    listed = {item["job"]: item for item in resp.json()}
    assert all(set(item) == LISTED for item in listed.values())  # no statistic, no count
    assert listed[job_id]["status"] == "succeeded" and listed[job_id]["labels"] is True
    assert listed[failed_id]["status"] == "failed" and listed[failed_id]["labels"] is False
    member_job = listed[job_id]["id"]

    path = f"/v1/datasets/{own}/federated-jobs/{member_job}/labels"
    resp = client.get(path, headers=auth(keys["owner"]))
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/csv")
    lines = resp.text.splitlines()
    assert lines[0] == "label"
    labels = np.array([int(v) for v in lines[1:]])
    _nearest_check(parsed(PARTS[0]), centers, labels)
    npy = client.get(path, params={"format": "npy"}, headers=auth(keys["owner"]))
    assert npy.status_code == 200
    np.testing.assert_array_equal(np.load(io.BytesIO(npy.content)), labels)

    # Anyone but the member dataset's owner: 404 for the list and the labels.
    for key in (keys["analyst"], keys["other_owner"]):
        assert _listed(client, key, own).status_code == 404
        assert client.get(path, headers=auth(key)).status_code == 404
    # Another member's job under this dataset's path: 404.
    other_job = _listed(client, keys["owner"], members[1]["dataset"]["id"]).json()[0]["id"]
    other_path = f"/v1/datasets/{own}/federated-jobs/{other_job}/labels"
    assert client.get(other_path, headers=auth(keys["owner"])).status_code == 404
    # The job that failed holds no centres: 409.
    failed_path = f"/v1/datasets/{own}/federated-jobs/{listed[failed_id]['id']}/labels"
    resp = client.get(failed_path, headers=auth(keys["owner"]))
    assert resp.status_code == 409 and resp.json()["code"] == "job-not-succeeded"
    # The coordinator holds no rows: its own labels route still refuses a federated job.
    resp = client.get(f"/v1/jobs/{job_id}/labels", headers=auth(keys["owner"]))
    assert resp.status_code == 409 and resp.json()["code"] == "federated-dataset"

    _finish_checks(client, members[0]["key"], listed[failed_id]["id"], failed_path, keys)


def _finish_checks(
    client: TestClient, member_key: str, member_job: str, labels_path: str, keys: dict[str, Any]
) -> None:
    """A finish's centres are checked (k rows of d finite numbers, only with success), and a
    job that ended otherwise never takes them."""
    finish = f"/v1/federation/jobs/{member_job}/finish"
    for body in (
        {"succeeded": True, "centers": [[0.0, 0.0, 0.0]]},  # d = 3, the dataset has 2
        {"succeeded": True, "centers": []},
        {"succeeded": False, "centers": [[0.0, 0.0]]},
    ):
        resp = client.post(finish, headers=auth(member_key), json=body)
        assert resp.status_code == 422, (body, resp.text)
    not_finite = b'{"succeeded": true, "centers": [[NaN, 0.0]]}'
    resp = client.post(
        finish,
        headers=auth(member_key) | {"content-type": "application/json"},
        content=not_finite,
    )
    assert resp.status_code == 422, resp.text
    resp = client.post(
        finish, headers=auth(member_key), json={"succeeded": True, "centers": [[0.0, 0.0]]}
    )
    assert resp.status_code == 200 and resp.json()["status"] == "failed"
    assert client.get(labels_path, headers=auth(keys["owner"])).status_code == 409
