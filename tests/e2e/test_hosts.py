"""The service spread over four test hosts (network namespaces on this machine, root only):
`privclust serve` (API, RQ worker, its queue and database) and the Dask scheduler on one, a Dask
worker on each of two others, and S3 (moto's server, a fake S3) on a fourth. Rows are uploaded
to the API, stored in S3, and every job's passes are computed by the Dask workers on their own
hosts, each reading its partitions from S3 over the network. And the jobs that cannot run there
end soon: the workers paused (as Dask pauses a worker whose memory is full) in the middle of a
job or before it starts, and a scheduler restarted without its workers.

It runs with the embedded database and queue (inside the API's host), as root, and only with
PRIVCLUST_TEST_HOSTS=1: `.ci/run` runs it as a step of its own, so the suite that `make test`
runs stays within its time on 2 cores.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.api import bearer_client, new_keys, running_long_job, uploaded, wait_for_job
from tests.support.data import blobs_and_centres, csv_bytes
from tests.support.hosts import (
    HostProcesses,
    Network,
    hosts_or_skip,
    network_of_hosts,
    processes_on,
)
from tests.support.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADMIN = "pck_hosts_test_admin_token"
BUCKET = "privclust-hosts"
AWS = {
    "AWS_ACCESS_KEY_ID": "fake-s3-key",
    "AWS_SECRET_ACCESS_KEY": "fake-s3-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Spread:
    """The running hosts: the network, the API's URL, and the processes on them by name
    (`procs.start(host, name, argv, env)` starts one again)."""

    network: Network
    base: str
    procs: HostProcesses
    env: dict[str, str]

    @property
    def scheduler(self) -> str:
        return f"tcp://{self.network.hosts['api'].address}:8786"

    def start(self, host: str, name: str, argv: list[str]) -> None:
        self.procs.start(host, name, argv, self.env)

    def all_logs(self) -> str:
        return self.procs.all_logs()


def _scheduler_argv(network: Network) -> list[str]:
    dask = str(Path(sys.executable).parent / "dask")
    address = network.hosts["api"].address
    return [dask, "scheduler", "--host", address, "--port", "8786", "--dashboard-address", ":0"]


def _worker_argv(network: Network, host: str) -> list[str]:
    dask = str(Path(sys.executable).parent / "dask")
    scheduler = f"tcp://{network.hosts['api'].address}:8786"
    address = network.hosts[host].address
    options = ["--host", address, "--nthreads", "1", "--dashboard-address", ":0"]
    return [dask, "worker", scheduler, *options]


@pytest.fixture
def spread(tmp_path: Path) -> Iterator[Spread]:
    hosts_or_skip()
    bin_dir = Path(sys.executable).parent
    with (
        network_of_hosts(["api", "w1", "w2", "s3"]) as network,
        processes_on(network, tmp_path) as procs,
    ):
        h = network.hosts
        s3_url = f"http://{h['s3'].address}:5000"
        scheduler = f"tcp://{h['api'].address}:8786"
        shared = {**os.environ, **AWS, "AWS_ENDPOINT_URL": s3_url, "PYTHONUNBUFFERED": "1"}
        # The tests pause workers as Dask's memory monitor does: without this, the monitor of
        # a worker far from its limit would resume it.
        shared["DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE"] = "False"
        s3 = procs.start(
            "s3", "s3", [str(bin_dir / "moto_server"), "-H", h["s3"].address, "-p", "5000"], shared
        )
        wait_until(lambda: _answers(s3_url), proc=s3, what="S3 did not start", log=procs.all_logs)
        import botocore.session

        botocore.session.get_session().create_client(
            "s3",
            endpoint_url=s3_url,
            region_name="us-east-1",
            aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket=BUCKET)
        procs.start("api", "scheduler", _scheduler_argv(network), shared)
        for w in ("w1", "w2"):
            procs.start(w, w, _worker_argv(network, w), shared)
        env = {k: v for k, v in shared.items() if not k.startswith("PRIVCLUST_")}
        env.update(
            PRIVCLUST_DATA_DIR=str(tmp_path / "var"),
            PRIVCLUST_HOST=h["api"].address,
            PRIVCLUST_PORT="8000",
            PRIVCLUST_ADMIN_TOKEN=ADMIN,
            PRIVCLUST_WORKER_THREADS="1",
            PRIVCLUST_STORAGE_URL=f"s3://{BUCKET}/datasets",
            PRIVCLUST_PARTITION_ROWS="500",
            PRIVCLUST_DASK_SCHEDULER=scheduler,
            PRIVCLUST_DASK_CONNECT_SECONDS="10",
            PRIVCLUST_DASK_STALL_SECONDS="5",
        )
        serve = procs.start("api", "serve", [sys.executable, "-m", "app.cli", "serve"], env)
        base = f"http://{h['api'].address}:8000"
        wait_until(
            lambda: _answers(base + "/readyz"),
            proc=serve,
            what="the API did not start",
            log=procs.all_logs,
            timeout=120,
        )
        _wait_for_workers(scheduler, 2)
        yield Spread(network, base, procs, shared)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def _wait_for_workers(scheduler: str, n: int) -> None:
    from dask.distributed import Client

    with Client(scheduler, timeout=60) as client:
        client.wait_for_workers(n, timeout=60)


def _workers_and_tasks(scheduler: str) -> tuple[list[str], int]:
    from dask.distributed import Client

    def count(dask_scheduler: object) -> int:
        prefix = dask_scheduler.task_prefixes.get("partition_total")  # type: ignore[attr-defined]
        return 0 if prefix is None else int(prefix.state_counts.get("memory", 0))

    with Client(scheduler, timeout=30) as client:
        hosts = sorted(
            w.split("://")[1].rsplit(":", 1)[0] for w in client.scheduler_info()["workers"]
        )
        return hosts, int(client.run_on_scheduler(count))


def test_a_job_runs_on_dask_workers_on_other_hosts_reading_s3_on_another(spread: Spread) -> None:
    network, base, all_logs = spread.network, spread.base, spread.all_logs
    h = network.hosts
    scheduler = spread.scheduler

    with bearer_client(base, ADMIN) as admin:
        owner_key, analyst_key = new_keys(admin)
    rows, true_centres = blobs_and_centres(2000, 3, 3, seed=8, spread=0.3, half_width=5)
    with bearer_client(base, owner_key) as owner, bearer_client(base, analyst_key) as analyst:
        ds = uploaded(owner, None, csv_bytes(rows, digits=6), name="hosts", epsilon=6, radius=12)
        hosts, before = _workers_and_tasks(scheduler)
        assert hosts == sorted([h["w1"].address, h["w2"].address])
        for algorithm in ("auto",):
            body = {"k": 3, "epsilon": 1.5, "algorithm": algorithm}
            r = analyst.post(f"/v1/datasets/{ds['id']}/jobs", json=body)
            assert r.status_code == 202, r.text
            job = wait_for_job(analyst, r.json()["id"], {"succeeded", "failed"}, 180, all_logs)
            assert job["status"] == "succeeded", (job, all_logs())
            centres = np.array(job["result"]["centers"])
            gaps = np.linalg.norm(true_centres[:, None, :] - centres[None], axis=2).min(axis=1)
            assert gaps.max() < 3.0, (algorithm, gaps)
        _, after = _workers_and_tasks(scheduler)
        # 2,000 rows in partitions of 500: each pass is 4 tasks, on the two workers' hosts.
        assert after - before >= 4 * 2
    # The rows are in S3 on its own host, and no copy on the API's.
    assert not list((spread.procs.logs["serve"].parent / "var").rglob("*.npy"))


def _set_workers(scheduler: str, status: str) -> None:
    """Every worker's status (paused: it takes no new task, as when its memory is full). The
    function is a lambda, sent by value: the workers' hosts cannot import the tests."""
    from dask.distributed import Client

    with Client(scheduler, timeout=30) as client:
        client.run(
            lambda dask_worker: setattr(dask_worker, "status", type(dask_worker.status)[status])
        )
        wait_until(
            lambda: all(
                w["status"] == status
                for w in client.scheduler_info(n_workers=-1)["workers"].values()
            ),
            proc=None,
            log=lambda: "",
            what=f"the workers did not become {status}",
        )


def _ledger(client: httpx.Client, dataset_id: str, job_id: str) -> list[str]:
    entries = client.get(f"/v1/datasets/{dataset_id}/ledger").json()["entries"]
    return [e["kind"] for e in entries if e.get("job_id") == job_id]


def _job(analyst: httpx.Client, dataset_id: str, spread: Spread) -> dict:
    r = analyst.post(f"/v1/datasets/{dataset_id}/jobs", json={"k": 3, "epsilon": 0.5})
    assert r.status_code == 202, r.text
    return wait_for_job(analyst, r.json()["id"], {"succeeded", "failed"}, 180, spread.all_logs)


def test_jobs_that_cannot_run_on_the_hosts_end_soon_and_the_next_one_succeeds(
    spread: Spread,
) -> None:
    """Each job that cannot run fails within a minute (the stall time here is 5 s, the wait for
    a running worker 10 s), naming the cause; the next job on the same cluster succeeds."""
    with bearer_client(spread.base, ADMIN) as admin:
        owner_key, analyst_key = new_keys(admin)
    rows, _ = blobs_and_centres(2000, 3, 3, seed=9, spread=0.3, half_width=5)
    with (
        bearer_client(spread.base, owner_key) as owner,
        bearer_client(spread.base, analyst_key) as analyst,
    ):
        ds = uploaded(owner, None, csv_bytes(rows, digits=6), name="hang", epsilon=20, radius=12)
        # Paused in the middle of a job: failed once its tasks could not run for 5 s, charged.
        running = running_long_job(analyst, ds["id"], spread.all_logs)
        _set_workers(spread.scheduler, "paused")
        job = wait_for_job(analyst, running["id"], {"failed", "succeeded"}, 60, spread.all_logs)
        assert job["status"] == "failed" and "paused because its memory is full" in job["error"]
        assert _ledger(owner, ds["id"], job["id"])[-2:] == ["commit", "failed"]
        # Still paused: /readyz says so, and a job refuses to start, refunded.
        ready = httpx.get(spread.base + "/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["failing"] == ["dask"], ready.text
        job = _job(analyst, ds["id"], spread)
        assert "paused" in job["error"] and "nothing was charged" in job["error"], job
        assert _ledger(owner, ds["id"], job["id"])[-2:] == ["refund", "failed"]
        _set_workers(spread.scheduler, "running")
        assert _job(analyst, ds["id"], spread)["status"] == "succeeded"
        # A scheduler restarted without its workers: refused with nothing charged.
        for name in ("w1", "w2", "scheduler"):
            spread.procs.stop(name)
        spread.start("api", "scheduler", _scheduler_argv(spread.network))
        wait_until(
            lambda: _answers_tcp(spread.network.hosts["api"].address, 8786),
            proc=spread.procs.processes["scheduler"],
            what="the scheduler did not start again",
            log=spread.all_logs,
        )
        job = _job(analyst, ds["id"], spread)
        assert "no worker connected" in job["error"] and "nothing was charged" in job["error"]
        for w in ("w1", "w2"):
            spread.start(w, w, _worker_argv(spread.network, w))
        _wait_for_workers(spread.scheduler, 2)
        assert _job(analyst, ds["id"], spread)["status"] == "succeeded"


def _answers_tcp(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False
