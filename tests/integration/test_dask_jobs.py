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
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.support.api import auth
from tests.support.dask import local_cluster, process_cluster
from tests.support.dask_jobs import dataset, ledger_kinds, long_job, submit, use
from tests.support.patience import join
from tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# One of each kind of pass (the vote and the Lloyd step, the projected clusters, the tree); the
# end-to-end test on S3 and Dask runs every method.
ALGORITHMS = ["pe-lloyd", "hdpe-means", "lsh-coreset"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, object]]:
    with local_cluster() as pair:
        yield pair


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
    use(monkeypatch, DASK_SCHEDULER=lc.scheduler_address, PARTITION_ROWS="200")
    ds = dataset(client, keys["owner"])
    before = _partition_tasks(dask)
    body = {"k": 2, "epsilon": 1.0, "algorithm": algorithm, "summaries": True}
    job_id = submit(client, keys["analyst"], ds["id"], body)
    assert run_clustering_job(job_id) == "succeeded"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "succeeded", job
    centres = np.array(job["result"]["centers"])
    # What this test is about is where the passes ran and what was charged, not how close the
    # noisy centres come: that is the library's (tests/unit/test_distributed_passes.py shows a
    # run on the cluster is the in-process run bit for bit). The bound this test had, each
    # centre within 1.5, failed by chance: the same lsh-coreset run in process (these 600
    # rows, epsilon 1, summaries) missed it in 3 of 174 runs (largest error 1.83, median 0.54).
    assert centres.shape == (2, 2) and np.isfinite(centres).all()
    # 600 rows in partitions of 200: each of the job's passes (at least two) is 3 tasks.
    assert _partition_tasks(dask) - before >= 3 * 2
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "succeeded"]


def test_a_scheduler_that_does_not_answer_fails_the_job_before_any_noise_refunded(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    use(
        monkeypatch,
        DASK_SCHEDULER=f"tcp://127.0.0.1:{free_port()}",
        DASK_CONNECT_SECONDS="1",
    )
    ds = dataset(client, keys["owner"])
    spent = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    job_id = submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
    assert run_clustering_job(job_id) == "failed"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "Dask cluster" in job["error"]
    assert "nothing was charged" in job["error"]
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "refund", "failed"]
    after = client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert after["mu_spent"] == spent["mu_spent"] and after["mu_reserved"] == 0


def test_a_dask_worker_killed_mid_job_leaves_it_succeeded_and_charged_once(
    client: TestClient, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    with local_cluster() as (lc, _):
        ds, job_id, thread, outcome = long_job(client, keys, monkeypatch, lc.scheduler_address)
        nanny = next(iter(lc.workers.values()))
        os.kill(nanny.process.process.pid, signal.SIGKILL)
        join(thread, 240)
        assert outcome == ["succeeded"]
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "succeeded"
    assert ledger_kinds(client, keys["analyst"], ds["id"]) == [
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
        ds, job_id, thread, outcome = long_job(client, keys, monkeypatch, address)
        scheduler.kill()  # type: ignore[attr-defined]
        join(thread, 240)
    assert outcome == ["failed"]
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "stays charged" in job["error"]
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "failed"]
    # Run again (a retried RQ job): it is no longer queued, so nothing runs and nothing is drawn.
    assert run_clustering_job(job_id) == "failed"
    assert ledger_kinds(client, keys["analyst"], ds["id"]) == kinds
