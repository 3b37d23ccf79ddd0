"""Many clients polling one job at once against a real uvicorn process: every one is answered.

A small-scale reproduction of the API stalling under concurrent polling: more simultaneous
requests than the database pool has connections (and than the server has threads) used to
deadlock request threads against pooled connections until the pool timed out.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.jobs import service as jobs_service
from app.kit.config import Settings
from app.kit.db.session import session_scope
from tests.conftest import make_key
from tests.integration.helpers import admit, make_dataset, running_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 60
SECONDS = 4.0
REQUEST_TIMEOUT = 15.0  # generous: a healthy server answers in milliseconds


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`privclust api` (uvicorn) as a real process on this test's database and Redis."""
    with running_api(tmp_path) as base:
        yield base


def test_sixty_clients_polling_one_job_are_all_answered(settings: Settings, api_url: str) -> None:
    db_url = settings.resolved_database_url
    analyst = make_key(db_url, "acme", "analyst")
    dataset_id = make_dataset(db_url, mu_cap=2.0)
    with session_scope(db_url) as s:
        admitted = admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.5))
    assert admitted is not None
    job_id = admitted[0]
    outcomes: Counter[str] = Counter()

    def poll_until_deadline(deadline: float) -> Counter[str]:
        seen: Counter[str] = Counter()
        with httpx.Client(
            base_url=api_url,
            timeout=REQUEST_TIMEOUT,
            headers={"Authorization": f"Bearer {analyst}"},
        ) as client:
            while True:  # at least one request per client, then until the deadline
                try:
                    r = client.get(f"/v1/jobs/{job_id}")
                    seen[str(r.status_code)] += 1
                except httpx.HTTPError as exc:
                    seen[type(exc).__name__] += 1
                    return seen
                if time.monotonic() >= deadline:
                    return seen

    deadline = time.monotonic() + SECONDS
    with ThreadPoolExecutor(CLIENTS) as pool:
        for seen in pool.map(poll_until_deadline, [deadline] * CLIENTS):
            outcomes.update(seen)
    assert set(outcomes) == {"200"}, dict(outcomes)
    assert outcomes["200"] >= CLIENTS
