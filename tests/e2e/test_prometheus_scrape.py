"""A real Prometheus scrapes a real `privclust api` (two uvicorn processes) and a worker.

Uses Debian's `prometheus` binary (.ci/install-prometheus installs it); skipped without it.
The counters it reads are summed over both API processes (prometheus-client multiprocess mode).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.api import uploaded
from tests.support.data import csv_bytes
from tests.support.db import make_key
from tests.support.patience import Patience
from tests.support.processes import answers, free_port, log_tail, stop, wait_until
from tests.support.services import Stack

PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="no prometheus binary: install Debian's package (`apt-get install prometheus`, "
        "as .ci/install-prometheus does) to run the real scrape test",
    ),
]


@pytest.fixture
def two_api_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Requested before `stack`, which copies the environment when it starts the API.
    monkeypatch.setenv("PRIVCLUST_API_WORKERS", "2")


@pytest.fixture
def prometheus(tmp_path: Path, stack: Stack) -> Iterator[str]:
    token = tmp_path / "admin-token"
    token.write_text(stack.admin_key)
    token.chmod(0o600)
    config = tmp_path / "prometheus.yml"
    target = stack.base_url.removeprefix("http://")
    config.write_text(
        f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: privclust
    metrics_path: /metrics
    authorization:
      credentials_file: {token}
    static_configs:
      - targets: ["{target}"]
"""
    )
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    assert PROMETHEUS is not None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        ready = answers(base + "/-/ready")
        wait_until(
            ready, proc=proc, log=log_tail(log_path), what="Prometheus not ready", interval=0.3
        )
        yield base
    finally:
        stop(proc, timeout=15)


def _metric_file_pids(api_pid: int) -> set[str]:
    children = Path(f"/proc/{api_pid}/task/{api_pid}/children").read_text().split()
    directories = set()
    for child in children:
        environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        for entry in environ:
            if entry.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
                directories.add(entry.split(b"=", 1)[1].decode())
    (directory,) = directories
    return {p.stem.rsplit("_", 1)[1] for p in Path(directory).glob("*.db")}


def query(base: str, expr: str) -> float | None:
    r = httpx.get(base + "/api/v1/query", params={"query": expr}, timeout=5)
    r.raise_for_status()
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def wait_for(base: str, expr: str, expected: float, stack: Stack, timeout: float = 60) -> None:
    patience = Patience(timeout)
    seen = None
    while patience.left():
        seen = query(base, expr)
        if seen == expected:
            return
        time.sleep(0.5)
    targets = httpx.get(base + "/api/v1/targets", timeout=5).json()
    raise AssertionError(f"{expr} = {seen}, expected {expected}\n{targets}\n{stack.logs()}")


def test_a_real_prometheus_scrapes_jobs_uploads_and_latency(
    two_api_processes: None, settings, stack: Stack, prometheus: str
) -> None:
    wait_for(prometheus, 'up{job="privclust"}', 1.0, stack)
    with (
        stack.client(make_key(settings.resolved_database_url, "acme", "owner")) as owner,
        stack.client(make_key(settings.resolved_database_url, "acme", "analyst")) as analyst,
    ):
        _exercise(prometheus, stack, owner, analyst)


def _exercise(prometheus: str, stack: Stack, owner: httpx.Client, analyst: httpx.Client) -> None:
    body = csv_bytes(np.random.default_rng(3).normal(0.0, 1.0, (400, 2)), ["a", "b"], digits=4)
    datasets = []
    for i in range(4):  # spread over both API processes by the kernel
        ds = uploaded(owner, None, body, name=f"p{i}", filename="d.csv", epsilon="3", delta="1e-6")
        datasets.append(ds["id"])
    wait_for(prometheus, 'privclust_uploads_total{outcome="created"}', 4.0, stack)
    assert (query(prometheus, 'privclust_upload_bytes_total{outcome="created"}') or 0) > 4 * len(
        body
    )

    r = analyst.post(
        f"/v1/datasets/{datasets[0]}/jobs", json={"algorithm": "pe-means", "k": 2, "epsilon": 1.0}
    )
    assert r.status_code == 202, r.text
    wait_for(prometheus, 'privclust_jobs{status="succeeded",algorithm="pe-means"}', 1.0, stack)
    wait_for(prometheus, 'privclust_job_duration_seconds_count{algorithm="pe-means"}', 1.0, stack)
    r = analyst.post(
        f"/v1/datasets/{datasets[1]}/jobs", json={"algorithm": "pe-means", "k": 2, "epsilon": 99.0}
    )
    assert r.status_code == 409
    wait_for(prometheus, "privclust_budget_refusals_total", 1.0, stack)
    wait_for(
        prometheus,
        'sum(privclust_http_request_duration_seconds_count{route="/v1/datasets",method="POST"})',
        4.0,
        stack,
    )
    assert query(prometheus, "privclust_queue_depth") == 0.0

    # Fresh connections, which the kernel hands to either API process: the scraped count is the
    # sum over both (each process writes its own file in the multiprocess directory).
    import uuid

    for _ in range(40):
        httpx.get(
            f"{stack.base_url}/v1/jobs/{uuid.uuid4()}",
            headers={"Authorization": analyst.headers["Authorization"]},
            timeout=30,
        )
    wait_for(
        prometheus,
        'sum(privclust_http_request_duration_seconds_count{route="/v1/jobs/{job_id}",status="404"})',
        40.0,
        stack,
    )
    # The console's files count under their mount's route, and the figures read from Redis
    # and the ledger reach Prometheus: one live worker, a build, budgets by tenant.
    for path in ("/console/", "/console/js/main.js", "/console/console.css"):
        assert httpx.get(stack.base_url + path, timeout=30).status_code == 200
    wait_for(
        prometheus,
        'sum(privclust_http_request_duration_seconds_count{route="/console/{path}"})',
        3.0,
        stack,
    )
    wait_for(prometheus, "sum(privclust_workers)", 1.0, stack)
    wait_for(prometheus, "count(privclust_build_info == 1)", 1.0, stack)
    assert (query(prometheus, 'privclust_budget_mu_spent{tenant="acme"}') or 0) > 0
    # Both API processes run in multiprocess mode (each has written its values' file).
    assert len(_metric_file_pids(stack.api.pid)) == 2
