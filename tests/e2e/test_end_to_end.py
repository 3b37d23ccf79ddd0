"""End to end with real processes: upload -> job -> poll -> centres -> budget; races; crashes."""

from __future__ import annotations

import math
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.support.api import running_long_job, uploaded, wait_for_job
from tests.support.data import blobs_and_centres, csv_bytes
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    """One API for this module's tests: each makes its own keys and dataset, and a test that
    kills a worker starts the next one itself."""
    return module_stack


def _blobs_csv(n: int, d: int, k: int, seed: int = 3) -> tuple[bytes, np.ndarray]:
    x, centers = blobs_and_centres(n, d, k, seed, spread=0.3, half_width=5)
    return csv_bytes(x, digits=6), centers


def _upload(client: httpx.Client, data: bytes, epsilon: float, radius: float) -> dict:
    return uploaded(client, None, data, name="e2e", epsilon=epsilon, delta="1e-6", radius=radius)


def test_main_job_end_to_end(stack: Stack) -> None:
    owner_key, analyst_key = stack.new_keys()
    data, true_centers = _blobs_csv(2000, 3, 3)
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        ds = _upload(owner, data, epsilon=4.0, radius=12.0)
        r = analyst.post(f"/v1/datasets/{ds['id']}/jobs", json={"k": 3, "epsilon": 2.0})
        assert r.status_code == 202, r.text
        job = wait_for_job(analyst, r.json()["id"], {"succeeded", "failed"}, 120, stack.logs)
        assert job["status"] == "succeeded", job
        centers = np.array(job["result"]["centers"])
        assert centers.shape == (3, 3)
        assert job["result"]["columns"] == ["f0", "f1", "f2"]
        assert job["progress"]["iteration"] == job["progress"]["iterations"]
        # Utility sanity: every true centre has a released centre nearby.
        gaps = np.linalg.norm(true_centers[:, None, :] - centers[None], axis=2).min(axis=1)
        assert gaps.max() < 2.0, (gaps, centers, true_centers)
        budget = analyst.get(f"/v1/datasets/{ds['id']}/budget").json()
        # The noisy row count released at upload and the job compose.
        assert budget["mu_spent"] == pytest.approx(math.hypot(ds["count_mu"], job["privacy"]["mu"]))
        assert budget["mu_reserved"] == 0.0
        kinds = [
            e["kind"] for e in analyst.get(f"/v1/datasets/{ds['id']}/ledger").json()["entries"]
        ]
        assert kinds == ["cap", "count", "reserve", "commit", "succeeded"]
        view = analyst.get(f"/v1/datasets/{ds['id']}").json()
        assert view["n_rows"] is None and view["n_rows_dp"] == ds["n_rows_dp"]
        # Analysts see no exact statistics: the job carries only DP output and public metadata.
        assert set(job) <= {
            "id",
            "dataset_id",
            "algorithm",
            "k",
            "status",
            "progress",
            "privacy",
            "result",
            "error",
            "cancel_requested",
            "summaries",  # whether the request asked for private summaries
            "sweep_id",  # the sweep that admitted the job, if any
            "members",  # a federated job's per-member states (public); null here
            "created_at",
            "started_at",
            "finished_at",
        }
        assert job["members"] is None
        # Without summaries the result is the centres alone (no sizes or loss, noisy or not),
        # with the space a loss would be measured in, the warnings about the released figures
        # and the centres' error band (from public facts only, as the estimate's).
        result = job["result"]
        assert {k for k, v in result.items() if v is not None} == {
            "accuracy",
            "centers",
            "columns",
            "loss_space",
            "warnings",
        }
        assert result["loss_space"] == "original"


def test_32_simultaneous_submissions_with_room_for_5(stack: Stack) -> None:
    owner_key, analyst_key = stack.new_keys()
    data, _ = _blobs_csv(200, 2, 2)
    with stack.client(owner_key) as owner:
        ds = _upload(owner, data, epsilon=1.0, radius=10.0)
    # What the noisy row count left, shared by five jobs.
    mu = ds["budget"]["mu_remaining"] / math.sqrt(5)

    def submit(_: int) -> int:
        with stack.client(analyst_key) as c:
            return c.post(f"/v1/datasets/{ds['id']}/jobs", json={"k": 2, "mu": mu}).status_code

    with ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(submit, range(32)))
    assert codes.count(202) == 5 and codes.count(409) == 27, codes
    with stack.client(owner_key) as owner:
        ledger = owner.get(f"/v1/datasets/{ds['id']}/ledger").json()
    reserves = [e["mu"] for e in ledger["entries"] if e["kind"] == "reserve"]
    assert len(reserves) == 5
    spent = [ds["count_mu"], *reserves]
    assert math.sqrt(math.fsum(m * m for m in spent)) <= ds["budget"]["mu_cap"] * (1 + 1e-12)


def _start_long_job(stack: Stack, owner: httpx.Client, analyst: httpx.Client) -> tuple[dict, dict]:
    """A dataset and a job of 1000 iterations (tens of seconds), once it is running."""
    data, _ = _blobs_csv(20000, 8, 8)
    ds = _upload(owner, data, epsilon=8.0, radius=20.0)
    return ds, running_long_job(analyst, ds["id"], stack.logs)


def test_worker_killed_mid_job(stack: Stack) -> None:
    owner_key, analyst_key = stack.new_keys()
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        ds, long_job = _start_long_job(stack, owner, analyst)
        os.kill(stack.workers[0].pid, signal.SIGKILL)
        stack.workers[0].wait()
        failed = wait_for_job(analyst, long_job["id"], {"failed", "succeeded"}, 60, stack.logs)
        assert failed["status"] == "failed" and "worker" in failed["error"]
        assert failed["result"] is None
        budget = analyst.get(f"/v1/datasets/{ds['id']}/budget").json()
        assert budget["mu_spent"] == pytest.approx(
            math.hypot(ds["count_mu"], long_job["privacy"]["mu"])
        )
        # A fresh worker takes the next job; the dead job is never re-run.
        stack.start_worker()
        nxt = analyst.post(f"/v1/datasets/{ds['id']}/jobs", json={"k": 8, "epsilon": 1.0})
        assert nxt.status_code == 202
        done = wait_for_job(analyst, nxt.json()["id"], {"succeeded", "failed"}, 120, stack.logs)
        assert done["status"] == "succeeded", done
        again = analyst.get(f"/v1/jobs/{long_job['id']}").json()
        assert again["status"] == "failed"
        kinds = [
            e["kind"]
            for e in analyst.get(f"/v1/datasets/{ds['id']}/ledger").json()["entries"]
            if e["job_id"] == long_job["id"]
        ]
        assert kinds == ["reserve", "commit", "failed"]


def test_cancel_a_running_job_stops_it_and_it_stays_charged(stack: Stack) -> None:
    owner_key, analyst_key = stack.new_keys()
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        ds, job = _start_long_job(stack, owner, analyst)
        r = analyst.post(f"/v1/jobs/{job['id']}/cancel")
        assert r.status_code == 200 and r.json()["cancel_requested"]
        stopped = wait_for_job(
            analyst, job["id"], {"cancelled", "failed", "succeeded"}, 60, stack.logs
        )
        assert stopped["status"] == "cancelled" and stopped["result"] is None
        budget = analyst.get(f"/v1/datasets/{ds['id']}/budget").json()
        assert budget["mu_spent"] == pytest.approx(math.hypot(ds["count_mu"], job["privacy"]["mu"]))
