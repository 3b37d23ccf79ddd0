"""The worker's job process (worker.runner): jobs run in a long-lived process of their own; one
that dies (as under the OOM killer), overruns the time limit or grows past the memory limit
takes only its own job with it, and the next job runs in a fresh process. Real database,
Redis, processes and jobs."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.jobs import service as jobs_service
from app.kit.config import Settings
from app.kit.db.session import session_scope
from app.ledger import repository as ledger_repo
from app.models import Job
from tests.support.api import auth, uploaded
from tests.support.data import blobs, csv_bytes
from tests.support.patience import Patience

pytestmark = pytest.mark.integration


def _submit(client: TestClient, key: str, dataset_id: str, body: dict) -> str:
    r = client.post(f"/v1/datasets/{dataset_id}/jobs", headers=auth(key), json=body)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _job(settings: Settings, job_id: str) -> tuple[str, str | None, list[str]]:
    with session_scope(settings.resolved_database_url) as s:
        job = s.get(Job, uuid.UUID(job_id))
        assert job is not None
        kinds = [e.kind for e in ledger_repo.all_ledger_entries_for_job(s, job.id)]
        return job.status, job.error, kinds


def _wait_running(settings: Settings, job_id: str) -> None:
    patience = Patience(60)
    while _job(settings, job_id)[0] != "running":
        assert patience.left(), "the job never started"
        time.sleep(0.05)


def test_a_dying_or_overrunning_job_process_takes_only_its_own_job(
    client: TestClient, keys, settings: Settings
) -> None:
    from worker.runner import JobRunner

    owner, analyst = keys["owner"], keys["analyst"]
    small = uploaded(client, owner, csv_bytes(blobs(200, 2, 2, 1)), epsilon=1000, radius=1)["id"]
    big = uploaded(client, owner, csv_bytes(blobs(20000, 8, 8, 2)), epsilon=1000, radius=2)["id"]
    tiny = {"k": 1, "mu": 0.01}
    long = {"k": 8, "epsilon": 1.0, "params": {"iterations": 1000}}
    runner = JobRunner(settings.resolved_database_url, job_timeout=600, max_rss_mb=4096)
    runner.start()
    try:
        assert runner.child is not None
        first_pid = runner.child.process.pid
        assert runner.run(_submit(client, analyst, small, tiny)) == "succeeded"

        # Killed mid-job (what the OOM killer does): that job fails and stays charged.
        doomed = _submit(client, analyst, big, long)
        outcome: list[str] = []
        thread = threading.Thread(target=lambda: outcome.append(runner.run(doomed)))
        thread.start()
        _wait_running(settings, doomed)
        os.kill(first_pid, signal.SIGKILL)
        thread.join(60)
        assert outcome == ["failed"]
        status, error, kinds = _job(settings, doomed)
        assert (status, error) == ("failed", jobs_service.RUNNER_DIED)
        assert kinds == ["reserve", "commit", "failed"]
        # The next job runs in a fresh process.
        assert runner.run(_submit(client, analyst, small, tiny)) == "succeeded"
        assert runner.child is not None and runner.child.process.pid != first_pid

        # Past the time limit: stopped, failed, charged; the process after it is fresh again.
        runner.job_timeout = 2
        slow = _submit(client, analyst, big, long)
        assert runner.run(slow) == "failed"
        status, error, kinds = _job(settings, slow)
        assert (status, error) == ("failed", jobs_service.TIMED_OUT)
        assert kinds == ["reserve", "commit", "failed"]
        runner.job_timeout = 600

        # A process a job left above the memory limit is replaced after that job.
        runner.max_rss_mb = 1
        assert runner.run(_submit(client, analyst, small, tiny)) == "succeeded"
        assert runner.child is None
        assert runner.run(_submit(client, analyst, small, tiny)) == "succeeded"
    finally:
        runner.stop()
    budget = client.get(f"/v1/datasets/{big}/budget", headers=auth(owner)).json()
    assert budget["jobs"] == 2 and budget["mu_reserved"] == 0.0


def test_a_job_lost_before_it_started_is_refunded(client: TestClient, keys, settings) -> None:
    """The process died with the job id sent but before the job's charge: nothing was drawn,
    so the job is failed and refunded."""
    owner, analyst = keys["owner"], keys["analyst"]
    ds = uploaded(client, owner, csv_bytes(blobs(200, 2, 2, 1)), epsilon=1000, radius=1)["id"]
    job_id = _submit(client, analyst, ds, {"k": 1, "mu": 0.01})
    run = jobs_service.JobRun(settings.resolved_database_url, uuid.UUID(job_id))
    assert run.lost() == "failed"
    status, error, kinds = _job(settings, job_id)
    assert status == "failed" and "refunded" in (error or "")
    assert kinds == ["reserve", "refund", "failed"]
    assert np.isclose(
        client.get(f"/v1/datasets/{ds}/budget", headers=auth(owner)).json()["mu_reserved"], 0
    )
