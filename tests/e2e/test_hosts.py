"""The service spread over four test hosts (network namespaces on this machine, root only):
`privclust serve` (API, RQ worker, its queue and database) and the Dask scheduler on one, a Dask
worker on each of two others, and S3 (moto's server, a fake S3) on a fourth. Rows are uploaded
to the API, stored in S3, and every job's passes are computed by the Dask workers on their own
hosts, each reading its partitions from S3 over the network.

It runs with the embedded database and queue (inside the API's host), as root, and only with
PRIVCLUST_TEST_HOSTS=1: `.ci/run` runs it as a step of its own, so the suite that `make test`
runs stays within its time on 2 cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.api import bearer_client, new_keys, uploaded, wait_for_job
from tests.support.data import blobs_and_centres, csv_bytes
from tests.support.hosts import Network, can_make_hosts, network_of_hosts
from tests.support.processes import wait_until
from tests.support.repo import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADMIN = "pck_hosts_test_admin_token"
BUCKET = "privclust-hosts"
AWS = {
    "AWS_ACCESS_KEY_ID": "fake-s3-key",
    "AWS_SECRET_ACCESS_KEY": "fake-s3-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _start(network: Network, host: str, argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            network.hosts[host].command(argv),
            env={**os.environ, **env},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture
def spread(tmp_path: Path) -> Iterator[tuple[Network, str, dict[str, Path]]]:
    if os.environ.get("PRIVCLUST_TEST_HOSTS") != "1":
        pytest.skip("needs root and its own network: PRIVCLUST_TEST_HOSTS=1 runs it (.ci/run does)")
    why = can_make_hosts()
    if why is not None:
        pytest.fail(f"PRIVCLUST_TEST_HOSTS=1, but this machine cannot make test hosts: {why}")
    bin_dir = Path(sys.executable).parent
    processes: list[subprocess.Popen] = []
    logs: dict[str, Path] = {}
    with network_of_hosts(["api", "w1", "w2", "s3"]) as network:
        h = network.hosts
        s3_url = f"http://{h['s3'].address}:5000"
        scheduler = f"tcp://{h['api'].address}:8786"
        shared = {**AWS, "AWS_ENDPOINT_URL": s3_url, "PYTHONUNBUFFERED": "1"}

        def start(host: str, what: str, argv: list[str], env: dict) -> None:
            logs[what] = tmp_path / f"{what}.log"
            processes.append(_start(network, host, argv, {**shared, **env}, logs[what]))

        try:
            start(
                "s3", "s3", [str(bin_dir / "moto_server"), "-H", h["s3"].address, "-p", "5000"], {}
            )
            wait_until(
                lambda: _answers(s3_url),
                proc=processes[-1],
                what="S3 did not start",
                log=lambda: logs["s3"].read_text(),
            )
            import botocore.session

            botocore.session.get_session().create_client(
                "s3",
                endpoint_url=s3_url,
                region_name="us-east-1",
                aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"],
            ).create_bucket(Bucket=BUCKET)
            dask = str(bin_dir / "dask")
            start(
                "api",
                "scheduler",
                [
                    dask,
                    "scheduler",
                    "--host",
                    h["api"].address,
                    "--port",
                    "8786",
                    "--dashboard-address",
                    ":0",
                ],
                {},
            )
            for w in ("w1", "w2"):
                start(
                    w,
                    w,
                    [
                        dask,
                        "worker",
                        scheduler,
                        "--host",
                        h[w].address,
                        "--nthreads",
                        "1",
                        "--dashboard-address",
                        ":0",
                    ],
                    {},
                )
            env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST_")}
            env.update(
                PRIVCLUST_DATA_DIR=str(tmp_path / "var"),
                PRIVCLUST_HOST=h["api"].address,
                PRIVCLUST_PORT="8000",
                PRIVCLUST_ADMIN_TOKEN=ADMIN,
                PRIVCLUST_WORKER_THREADS="1",
                PRIVCLUST_STORAGE_URL=f"s3://{BUCKET}/datasets",
                PRIVCLUST_PARTITION_ROWS="500",
                PRIVCLUST_DASK_SCHEDULER=scheduler,
                PRIVCLUST_DASK_CONNECT_SECONDS="30",
            )
            logs["serve"] = tmp_path / "serve.log"
            with open(logs["serve"], "wb") as out:
                processes.append(
                    subprocess.Popen(
                        h["api"].command([sys.executable, "-m", "app.cli", "serve"]),
                        env={**env, **shared},
                        cwd=ROOT,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            base = f"http://{h['api'].address}:8000"
            wait_until(
                lambda: _answers(base + "/readyz"),
                proc=processes[-1],
                what="the API did not start",
                log=lambda: logs["serve"].read_text(),
                timeout=120,
            )
            _wait_for_workers(scheduler, 2)
            yield network, base, logs
        finally:
            for proc in reversed(processes):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in reversed(processes):
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


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


def test_a_job_runs_on_dask_workers_on_other_hosts_reading_s3_on_another(
    spread: tuple[Network, str, dict[str, Path]],
) -> None:
    network, base, logs = spread
    h = network.hosts
    scheduler = f"tcp://{h['api'].address}:8786"

    def all_logs() -> str:
        return "\n".join(f"--- {name}\n{path.read_text()[-3000:]}" for name, path in logs.items())

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
    assert not list((Path(logs["serve"]).parent / "var").rglob("*.npy"))
