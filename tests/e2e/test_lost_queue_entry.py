"""A queued job whose queue entry is lost still runs: the API's sweeper enqueues it again."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
from redis import Redis

from app.kit.config import Settings
from app.kit.queue import tenant_queue
from tests.support.api import uploaded, wait_for_job
from tests.support.data import csv_bytes
from tests.support.patience import Patience
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_a_job_whose_queue_entry_was_flushed_runs(stack: Stack, settings: Settings) -> None:
    # No worker for now, so that the job waits in the queue.
    worker = stack.workers[0]
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    owner_key, analyst_key = stack.new_keys()
    body = csv_bytes(np.random.default_rng(1).normal(0, 1, (300, 2)), ["a", "b"], digits=5)
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        dataset = uploaded(
            owner, None, body, name="lost", filename="x.csv", epsilon="2", delta="1e-6", radius="5"
        )
        job = analyst.post(f"/v1/datasets/{dataset['id']}/jobs", json={"k": 2, "epsilon": 1.0})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]

        redis = Redis.from_url(stack.env["PRIVCLUST_REDIS_URL"])
        queue = tenant_queue(settings, "acme", redis)
        assert queue.get_job_ids() == [job_id]
        redis.flushdb()  # the queue forgets the job; the database still has it queued
        patience = Patience(120)
        while queue.get_job_ids() != [job_id]:
            assert patience.left(), "never enqueued again\n" + stack.logs()
            time.sleep(0.2)
        stack.start_worker()
        done = wait_for_job(
            analyst, job_id, {"succeeded", "failed"}, patience.seconds - patience.used, stack.logs
        )
        assert done["status"] == "succeeded"
        entries = analyst.get(f"/v1/datasets/{dataset['id']}/ledger").json()["entries"]
        assert [e["kind"] for e in entries if e["job_id"] == job_id] == [
            "reserve",
            "commit",
            "succeeded",
        ]
    # The whole log: stack.logs() keeps only each file's tail, which a slow job's polls can fill.
    assert "enqueued again" in (stack.log_dir / "api.log").read_text(), stack.logs()
