"""Dask jobs that cannot make progress end soon, and no worker keeps an ended run's rows (a real
LocalCluster of worker processes, the real API, database and Redis).

Workers are paused as Dask's memory monitor pauses them when their memory is full
(tests.support.dask.pause_workers; the clusters here have no memory limit, so that the monitor
does not resume them). The stall time is a second: a job fails once the scheduler has shown no
running worker and no task executing for that long, however loaded the machine is.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.kit.cluster_watch import ClusterStalled, ClusterWatch
from privclust.clustering.data.rows import PartitionedTable, Reading
from privclust.clustering.evolution.vote import VoteCounts
from privclust.distributed import DaskEngine, cached_runs
from tests.support.api import auth
from tests.support.dask import blocks, local_cluster, pause_workers, resume_workers
from tests.support.dask_jobs import dataset, ledger_kinds, long_job, submit, use
from tests.support.data import blobs
from tests.support.patience import join
from tests.support.workers import registered_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, object]]:
    with local_cluster(memory_limit=0) as pair:
        yield pair


@pytest.fixture
def paused(cluster: tuple) -> Iterator[object]:
    """The cluster's client; every worker paused by the test is running again afterwards."""
    yield cluster[1]
    resume_workers(cluster[1])


def _held(dask: object) -> list[str]:
    return sorted(run for runs in cached_runs(dask).values() for run in runs)


def _gauges(client: TestClient, admin: str) -> dict[tuple[str, str], float]:
    """/metrics' samples by (name, status label)."""
    r = client.get("/metrics", headers=auth(admin))
    assert r.status_code == 200
    return {
        (s.name, s.labels.get("status", "")): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def test_a_job_whose_workers_are_all_paused_fails_within_the_stall_time_charged(
    client: TestClient, keys: dict, cluster: tuple, paused: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIVCLUST_DASK_STALL_SECONDS", "1")
    ds, job_id, thread, outcome = long_job(client, keys, monkeypatch, cluster[0].scheduler_address)
    pause_workers(paused)
    join(thread, 120)
    assert outcome == ["failed"]
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert "every worker (2) paused because its memory is full" in job["error"], job
    assert "stays charged" in job["error"]
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "failed"]
    assert _held(paused) == []


def test_cancel_stops_a_job_waiting_on_paused_workers(
    client: TestClient, keys: dict, cluster: tuple, paused: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIVCLUST_DASK_STALL_SECONDS", "3600")  # only the cancel can end it
    ds, job_id, thread, outcome = long_job(client, keys, monkeypatch, cluster[0].scheduler_address)
    pause_workers(paused)
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth(keys["analyst"]))
    assert r.status_code == 200, r.json()
    join(thread, 120)  # the heartbeat (every 0.5 s here) sees the request, the wait stops
    assert outcome == ["cancelled"]
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "commit", "cancelled"]


def test_a_cluster_without_a_running_worker_refuses_the_job_with_nothing_charged(
    client: TestClient, keys: dict, cluster: tuple, paused: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    use(monkeypatch, DASK_SCHEDULER=cluster[0].scheduler_address, DASK_CONNECT_SECONDS="0.5")
    ds = dataset(client, keys["owner"])
    pause_workers(paused)
    job_id = submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
    assert run_clustering_job(job_id) == "failed"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert "every worker (2) paused" in job["error"] and "nothing was charged" in job["error"]
    kinds = ledger_kinds(client, keys["analyst"], ds["id"])
    assert kinds == ["cap", "count", "reserve", "refund", "failed"]


def test_a_workerless_cluster_refuses_jobs_and_readyz_and_the_metrics_say_so(
    settings: object, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.kit.config import get_settings
    from app.main import create_app
    from worker.tasks import run_clustering_job

    with local_cluster(n_workers=0) as (lc, _):
        use(monkeypatch, DASK_SCHEDULER=lc.scheduler_address, DASK_CONNECT_SECONDS="0.5")
        with (
            TestClient(create_app(get_settings())) as client,
            registered_worker(get_settings()),
        ):
            r = client.get("/readyz")
            assert r.status_code == 503 and r.json()["failing"] == ["dask"], r.json()
            assert "no worker connected" in r.json()["detail"]
            gauges = _gauges(client, keys["admin"])
            assert gauges[("privclust_dask_up", "")] == 1
            assert gauges[("privclust_dask_can_run", "")] == 0
            assert gauges[("privclust_dask_workers", "running")] == 0
            assert gauges[("privclust_job_oldest_age_seconds", "queued")] == 0
            ds = dataset(client, keys["owner"])
            job_id = submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
            waiting = _gauges(client, keys["admin"])
            assert waiting[("privclust_job_oldest_age_seconds", "queued")] > 0
            assert run_clustering_job(job_id) == "failed"
            job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
            assert "no worker connected" in job["error"] and "nothing was charged" in job["error"]
            kinds = ledger_kinds(client, keys["analyst"], ds["id"])
            assert kinds == ["cap", "count", "reserve", "refund", "failed"]


def _vote_pass(engine: DaskEngine) -> None:
    X = blobs(600, 2, 2, seed=3)
    rows = PartitionedTable(blocks(X, 100), 2, engine).rows(Reading(radius=10.0, center=None))
    rows.total(VoteCounts(np.zeros((2, 2))))


def test_a_run_that_stalls_leaves_no_rows_on_any_worker(cluster: tuple, paused: object) -> None:
    engine = DaskEngine(paused, owner="stalled", wait=ClusterWatch(paused, stall_seconds=1))
    _vote_pass(engine)  # every partition prepared and cached on the workers
    assert _held(paused) and all(r.startswith("stalled.") for r in _held(paused))
    pause_workers(paused)
    with pytest.raises(ClusterStalled, match="paused because its memory is full"):
        _vote_pass(engine)
    engine.close()  # as the job's end does, whatever the end
    assert _held(paused) == []


def test_the_next_job_drops_the_rows_a_killed_job_left_on_the_workers(
    client: TestClient, keys: dict, cluster: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    lc, dask = cluster
    use(monkeypatch, DASK_SCHEDULER=lc.scheduler_address, PARTITION_ROWS="200")
    ds = dataset(client, keys["owner"])
    first = submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
    assert run_clustering_job(first) == "succeeded"
    # What a job process killed in the middle of its run leaves: the cached rows of a run
    # owned by a job that is no longer running (its engine never closed).
    _vote_pass(DaskEngine(dask, owner=first))
    assert _held(dask)
    second = submit(client, keys["analyst"], ds["id"], {"k": 2, "epsilon": 1.0})
    assert run_clustering_job(second) == "succeeded"
    assert _held(dask) == []
