"""`privclust serve` as a supervisor: real processes killed by PID with SIGKILL.

A killed worker or redis-server is restarted while the API keeps answering; a killed `serve`
leaves no child behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.api import bearer_client, new_keys, running_long_job, uploaded, wait_for_job
from tests.support.data import csv_bytes
from tests.support.processes import (
    alive,
    answers,
    children_of,
    cmdline,
    descendants,
    free_port,
    logged,
    serve_env,
    start_cli,
    stop,
    wait_until,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc"),
]

ADMIN = "pck_supervision_test_admin_token"


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    base: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def child(self, marker: str) -> int:
        found = [p for p in children_of(self.proc.pid) if marker in cmdline(p)]
        assert len(found) == 1, (marker, found, self.log())
        return found[0]

    def client(self, key: str = ADMIN) -> httpx.Client:
        return bearer_client(self.base, key)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    env = serve_env(
        tmp_path / "var",
        port,
        PRIVCLUST_ADMIN_TOKEN=ADMIN,
        PRIVCLUST_WORKER_THREADS="1",
        PRIVCLUST_HEARTBEAT_SECONDS="0.5",
        PRIVCLUST_STALE_JOB_SECONDS="3",
        PYTHONUNBUFFERED="1",
    )
    proc = start_cli("serve", env, tmp_path / "serve.log")
    s = Served(proc, f"http://127.0.0.1:{port}", tmp_path / "serve.log")
    try:
        wait_until(logged(s.log_path, "Press Ctrl-C to stop"), proc=proc, log=s.log)
        yield s
    finally:
        kids = descendants(proc.pid)
        stop(proc, timeout=30)
        for pid in kids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _keys(s: Served) -> tuple[str, str]:
    with s.client() as admin:
        return new_keys(admin)


def _upload(owner: httpx.Client, n: int, d: int) -> dict:
    body = csv_bytes(np.random.default_rng(5).normal(0, 3, (n, d)), digits=5)
    return uploaded(
        owner, None, body, name="sup", filename="x.csv", epsilon="20", delta="1e-6", radius="30"
    )


def test_a_killed_worker_is_replaced_and_its_job_fails_charged(served: Served) -> None:
    owner_key, analyst_key = _keys(served)
    with served.client(owner_key) as owner, served.client(analyst_key) as analyst:
        dataset = _upload(owner, 20000, 8)
        long_job = running_long_job(analyst, dataset["id"], served.log)
        worker = served.child("-m worker")
        os.kill(worker, signal.SIGKILL)
        killed_at = time.monotonic()

        assert analyst.get("/v1/jobs/" + long_job["id"]).status_code == 200
        nxt = analyst.post(f"/v1/datasets/{dataset['id']}/jobs", json={"k": 2, "epsilon": 0.5})
        assert nxt.status_code == 202, nxt.text
        # The replacement worker imports numpy and scikit-learn before it takes the job: 30 s
        # leaves room for a loaded machine (10 s failed under a parallel benchmark).
        taken = wait_for_job(
            analyst, nxt.json()["id"], {"running", "succeeded", "failed"}, 30, served.log
        )
        assert taken["status"] != "failed", taken
        assert served.child("-m worker") != worker

        failed = wait_for_job(analyst, long_job["id"], {"failed", "succeeded"}, 60, served.log)
        assert failed["status"] == "failed" and "worker" in failed["error"], failed
        assert time.monotonic() - killed_at < 60
        entries = analyst.get(f"/v1/datasets/{dataset['id']}/ledger").json()["entries"]
        kinds = [e["kind"] for e in entries if e["job_id"] == long_job["id"]]
        assert kinds == ["reserve", "commit", "failed"]  # charged, never refunded
    log = served.log_path.read_text(errors="replace")
    assert "worker 1 (pid" in log and "worker 1 restarted" in log


def test_a_killed_redis_server_is_restarted(served: Served) -> None:
    owner_key, analyst_key = _keys(served)
    redis_pid = served.child("redis-server")
    os.kill(redis_pid, signal.SIGKILL)
    wait_until(
        answers(served.base + "/readyz", timeout=2),
        proc=None,
        log=served.log,
        timeout=15,
        what="not ready 15 s after redis-server was killed",
    )
    assert served.child("redis-server") != redis_pid
    # The queue works again: a job submitted now is run by the (reconnected) worker.
    with served.client(owner_key) as owner, served.client(analyst_key) as analyst:
        dataset = _upload(owner, 300, 2)
        job = analyst.post(f"/v1/datasets/{dataset['id']}/jobs", json={"k": 2, "epsilon": 1.0})
        assert job.status_code == 202, job.text
        done = wait_for_job(analyst, job.json()["id"], {"succeeded", "failed"}, 60, served.log)
        assert done["status"] == "succeeded", done


def test_no_child_outlives_a_killed_serve(served: Served) -> None:
    owner_key, analyst_key = _keys(served)
    with served.client(owner_key) as owner, served.client(analyst_key) as analyst:
        dataset = _upload(owner, 20000, 8)
        running_long_job(analyst, dataset["id"], served.log)
    family = descendants(served.proc.pid)
    # redis-server, the API, the worker and the work horse running the job
    assert len(family) >= 4, [cmdline(p) for p in family]
    os.kill(served.proc.pid, signal.SIGKILL)
    served.proc.wait()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [cmdline(p) for p in family if alive(p)]
