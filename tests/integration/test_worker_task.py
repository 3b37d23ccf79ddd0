"""The worker's task in this process: it plans with the released row count, never the stored N.

Jobs are submitted through the real API (real database, real Redis) and then run by calling the
RQ task function directly, as a worker would, so its state changes and ledger entries are real.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient
from privclust.clustering import choose_algorithm
from privclust.privacy.gdp import noise_multiplier

from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, rows_around

pytestmark = pytest.mark.integration


def _rows(extreme: bool) -> np.ndarray:
    rows = rows_around(np.array([[-3.0, -3.0], [3.0, 3.0]]), 400, 0.5, np.random.default_rng(4))
    if extreme:
        # Far outside the declared ball: clipped at upload, so it cannot make the job fail.
        rows[7] = [1.5e308, -1.7e308]
    return rows


def _upload(client: TestClient, key: str, rows: np.ndarray, **extra: str) -> dict:
    body = csv_bytes(rows, ["a", "b"])
    return uploaded(
        client, key, body, name="w", filename="d.csv", epsilon="3", delta="1e-6", **extra
    )


def _run(client: TestClient, key: str, dataset_id: str, body: dict) -> dict:
    from worker.tasks import run_clustering_job

    r = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json=body)
    assert r.status_code == 202, r.json()
    assert run_clustering_job(r.json()["id"]) == "succeeded"
    return client.get(f"/v1/jobs/{r.json()['id']}", headers=auth(key)).json()


@pytest.mark.parametrize("count_public", [False, True])
@pytest.mark.parametrize(
    "algorithm", ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]
)
def test_a_job_runs_on_the_planning_count_and_is_charged_as_planned(
    client: TestClient, keys, count_public: bool, algorithm: str
) -> None:
    extra = {"count_public": "true"} if count_public else {}
    ds = _upload(client, keys["owner"], _rows(extreme=True), **extra)
    body = {"k": 2, "epsilon": 1.0, "algorithm": algorithm}
    job = _run(client, keys["analyst"], ds["id"], body)
    assert job["status"] == "succeeded", job
    if algorithm == "auto":
        # The job names the method that ran: the rule's pick from the public facts.
        count = ds["n_rows"] if count_public else ds["n_rows_dp"]
        assert job["algorithm"] == choose_algorithm(count, 2, 2, job["privacy"]["mu"])
    else:
        assert job["algorithm"] == algorithm
    centers = np.array(job["result"]["centers"])
    assert centers.shape == (2, 2) and np.isfinite(centers).all()
    assert (np.linalg.norm(centers, axis=1) <= 10.0).all()

    privacy = job["privacy"]
    assert math.sqrt(privacy["iterations"]) / privacy["sigma"] <= privacy["mu"]
    assert privacy["sigma"] == noise_multiplier(privacy["mu"], privacy["iterations"])
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger", headers=auth(keys["analyst"])).json()
    kinds = [e["kind"] for e in ledger["entries"]]
    first = ["cap"] if count_public else ["cap", "count"]
    assert kinds == [*first, "reserve", "commit", "succeeded"]
    for entry in ledger["entries"]:
        if entry["kind"] in ("reserve", "commit"):
            assert (entry["mu"], entry["sigma"], entry["iterations"]) == (
                privacy["mu"],
                privacy["sigma"],
                privacy["iterations"],
            )
    count_mu = 0.0 if count_public else ds["count_mu"]
    assert ledger["budget"]["mu_spent"] == pytest.approx(math.hypot(count_mu, privacy["mu"]))
    assert ledger["budget"]["mu_reserved"] == 0.0


def test_k_equal_to_a_released_count_above_n_still_runs(client: TestClient, keys) -> None:
    """k is checked against N~ only: when N~ exceeds N, a k between them still runs cleanly."""
    # A large count noise (std 1/0.005 = 200 rows on 10 rows) makes N~ > N likely; draw until so.
    rows = np.random.default_rng(1).normal(0.0, 1.0, (10, 2))
    for _ in range(20):
        ds = _upload(client, keys["owner"], rows, count_mu="0.005")
        if ds["n_rows_dp"] > 12:
            break
    else:  # pragma: no cover - P(N~ <= 12) is about 0.505 per upload: 0.505^20 ~ 1e-6
        pytest.fail("no released count above 12 in 20 uploads")
    job = _run(client, keys["analyst"], ds["id"], {"k": 12, "epsilon": 1.0})
    assert job["status"] == "succeeded", job
    assert len(job["result"]["centers"]) == 12


@pytest.mark.parametrize(
    ("algorithm", "param"),
    [
        ("fastlloyd", "variations"),
        ("fastlloyd", "projection_dim"),
        ("lsh-coreset", "variations"),
        ("lsh-coreset", "projection_dim"),
        ("pe-lloyd", "projection_dim"),
    ],
)
def test_pe_only_parameters_are_refused_for_the_other_methods(
    client: TestClient, keys, algorithm: str, param: str
) -> None:
    ds = _upload(client, keys["owner"], _rows(extreme=False))
    body = {"k": 2, "epsilon": 1.0, "algorithm": algorithm, "params": {param: 4}}
    for path in ("jobs", "jobs/estimate"):
        r = client.post(f"/v1/datasets/{ds['id']}/{path}", headers=auth(keys["analyst"]), json=body)
        assert r.status_code == 422 and r.json()["field"] == f"params.{param}", r.json()
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["mu_reserved"] == 0.0 and budget["jobs"] == 0


def test_unreadable_rows_fail_the_job_refunded_without_naming_the_file(
    client: TestClient, keys, session, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing noisy exists yet, so the job fails and is refunded; the reason analysts read
    # does not carry the server's storage path (the operator's log does).
    import json
    import uuid
    from pathlib import Path

    from app.models import Dataset
    from worker.tasks import run_clustering_job

    ds = _upload(client, keys["owner"], _rows(False))
    stored = session.get(Dataset, uuid.UUID(ds["id"])).storage_path
    Path(stored).unlink()  # its error message names the path
    r = client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "mu": 0.5}
    )
    assert r.status_code == 202, r.json()
    with caplog.at_level("WARNING", logger="privclust.worker"):
        assert run_clustering_job(r.json()["id"]) == "failed"
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "could not be read" in job["error"]
    assert stored not in json.dumps(job) and Path(stored).name not in json.dumps(job)
    assert stored in caplog.text
    budget = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["mu_reserved"] == 0.0 and budget["mu_spent"] == pytest.approx(ds["count_mu"])
