"""Jobs whose passes run on a real Dask cluster (LocalCluster, worker processes): every method
succeeds and is charged once; the cluster computes the passes; a scheduler that does not answer
fails the job before any noise, refunded; a scheduler lost in the middle fails it, charged and
never run again; a Dask worker killed in the middle changes nothing but the time.

Jobs are submitted through the real API (real database and Redis) and run by calling the RQ
task function in this process, as a worker would. Whether two runs agree bit for bit is checked
on the library (tests/unit/test_distributed_passes.py): here the noise is the service's own,
from OS entropy.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.kit.config import get_settings
from tests.support.api import auth, uploaded
from tests.support.dask import local_cluster, process_cluster
from tests.support.data import csv_bytes, rows_around
from tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# One of each kind of pass (the vote and the Lloyd step, the projected clusters, the tree); the
# end-to-end test on S3 and Dask runs every method.
ALGORITHMS = ["pe-lloyd", "hdpe-means", "lsh-coreset"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, object]]:
    with local_cluster() as pair:
        yield pair


def _use(monkeypatch: pytest.MonkeyPatch, **settings: str) -> None:
    for name, value in settings.items():
        monkeypatch.setenv(f"PRIVCLUST_{name}", value)
    get_settings.cache_clear()


def _dataset(client: TestClient, key: str, n: int = 600) -> dict:
    rows = rows_around(np.array([[-3.0, -3.0], [3.0, 3.0]]), n, 0.5, np.random.default_rng(4))
    body = csv_bytes(rows, ["a", "b"])
    return uploaded(
        client, key, body, name="d", filename="d.csv", epsilon="5", delta="1e-6", radius="10"
    )


def _submit(client: TestClient, key: str, dataset_id: str, body: dict) -> str:
    r = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json=body)
    assert r.status_code == 202, r.json()
    return str(r.json()["id"])


def _ledger_kinds(client: TestClient, key: str, dataset_id: str) -> list[str]:
    r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key))
    return [e["kind"] for e in r.json()["entries"]]


def _partition_tasks(client_of_cluster: object) -> int:
    """How many partitions' statistics the cluster has computed so far (Dask names a task's
    prefix after its function, without the leading underscore)."""

    def count(dask_scheduler: object) -> int:
        prefix = dask_scheduler.task_prefixes.get("partition_total")  # type: ignore[attr-defined]
        return 0 if prefix is None else int(prefix.state_counts.get("memory", 0))

    return int(client_of_cluster.run_on_scheduler(count))  # type: ignore[attr-defined]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_method_runs_its_passes_on_the_cluster_and_is_charged_once(
    client: TestClient, keys: dict, cluster: tuple, monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    from worker.tasks import run_clustering_job

    lc, dask = cluster
    _use(monkeypatch, DASK_SCHEDULER=lc.scheduler_address, PARTITION_ROWS="200")
    ds = _dataset(client, keys["owner"])
    before = _partition_tasks(dask)
    body = {"k": 2, "epsilon": 1.0, "algorithm": algorithm, "summaries": True}
    job_id = _submit(client, keys["analyst"], ds["id"], body)
    assert run_clustering_job(job_id) == "succeeded"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "succeeded", job
    centres = np.array(job["result"]["centers"])
    assert centres.shape == (2, 2) and np.isfinite(centres).all()
    # Two well-separated blobs at (-3, -3) and (3, 3): each found within 1.5 (epsilon 1, 600
    # rows; a fixed dataset, noise from OS entropy: far from the limit on every run seen).
    found = sorted(centres.tolist())
    assert np.allclose(found, [[-3.0, -3.0], [3.0, 3.0]], atol=1.5), found
    # 600 rows in partitions of 200: each of the job's passes (at least two) is 3 tasks.
    assert _partition_tasks(dask) - before >= 3 * 2
    kinds = _ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "succeeded"]


def test_a_scheduler_that_does_not_answer_fails_the_job_before_any_noise_refunded(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    _use(
        monkeypatch,
        DASK_SCHEDULER=f"tcp://127.0.0.1:{free_port()}",
        DASK_CONNECT_SECONDS="1",
    )
    ds = _dataset(client, keys["owner"])
    spent = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    job_id = _submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
    assert run_clustering_job(job_id) == "failed"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "Dask cluster" in job["error"]
    assert "nothing was charged" in job["error"]
    kinds = _ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "refund", "failed"]
    after = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert after["mu_spent"] == spent["mu_spent"] and after["mu_reserved"] == 0


def _run_in_thread(job_id: str) -> tuple[threading.Thread, list[str]]:
    from worker.tasks import run_clustering_job

    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(run_clustering_job(job_id)))
    thread.start()
    return thread, outcome


def _wait_running(client: TestClient, key: str, job_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(key)).json()
        if job["status"] == "running" and (job.get("progress") or {}).get("iteration", 0) >= 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never got going: {job}")


def _long_job(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> tuple[dict, str, threading.Thread, list[str]]:
    """A pe-means job of 10 passes over 2,000 rows in partitions of 100 with no cache (every
    pass is many tasks, so the job lasts seconds), running in a thread: (its dataset, its id,
    the thread, the status the task returns once it ends)."""
    _use(
        monkeypatch,
        DASK_SCHEDULER=scheduler,
        PARTITION_ROWS="100",
        DASK_CACHE_MB="0",
        DASK_CONNECT_SECONDS="2",
    )
    ds = _dataset(client, keys["owner"], n=2000)
    body = {"k": 2, "epsilon": 2.0, "algorithm": "pe-means"}
    job_id = _submit(client, keys["analyst"], ds["id"], body)
    thread, outcome = _run_in_thread(job_id)
    _wait_running(client, keys["analyst"], job_id)
    return ds, job_id, thread, outcome


def test_a_dask_worker_killed_mid_job_leaves_it_succeeded_and_charged_once(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    with local_cluster() as (lc, _):
        ds, job_id, thread, outcome = _long_job(client, keys, monkeypatch, lc.scheduler_address)
        nanny = next(iter(lc.workers.values()))
        os.kill(nanny.process.process.pid, signal.SIGKILL)
        thread.join(timeout=240)
        assert outcome == ["succeeded"]
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "succeeded"
    assert _ledger_kinds(client, keys["analyst"], ds["id"]) == [
        "cap",
        "count",
        "reserve",
        "commit",
        "succeeded",
    ]


def test_a_scheduler_lost_mid_job_fails_it_charged_and_never_reruns_it(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    with process_cluster() as (scheduler, address):
        ds, job_id, thread, outcome = _long_job(client, keys, monkeypatch, address)
        scheduler.kill()  # type: ignore[attr-defined]
        thread.join(timeout=240)
    assert outcome == ["failed"]
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "stays charged" in job["error"]
    kinds = _ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "failed"]
    # Run again (a retried RQ job): it is no longer queued, so nothing runs and nothing is drawn.
    assert run_clustering_job(job_id) == "failed"
    assert _ledger_kinds(client, keys["analyst"], ds["id"]) == kinds
