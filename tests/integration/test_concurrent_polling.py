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

from app.kit.config import Settings
from tests.support.api import auth
from tests.support.db import admitted_job, make_key
from tests.support.patience import oversubscription
from tests.support.services import running_api

pytestmark = pytest.mark.integration

CLIENTS = 60
SECONDS = 4.0
# Generous: a healthy server answers in milliseconds on a quiet machine. A deadlocked one
# answers an error once its pool times out, which the statuses catch however long the clients
# wait, so their wait stretches with the load (tests/support/patience.py).
REQUEST_TIMEOUT = 15.0


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`privclust api` (uvicorn) as a real process on this test's database and Redis."""
    with running_api(tmp_path) as api:
        yield api.base_url


def test_sixty_clients_polling_one_job_are_all_answered(settings: Settings, api_url: str) -> None:
    db_url = settings.resolved_database_url
    analyst = make_key(db_url, "acme", "analyst")
    _, job_id = admitted_job(db_url)
    outcomes: Counter[str] = Counter()
    stretch = oversubscription()

    def poll_until_deadline(deadline: float) -> Counter[str]:
        seen: Counter[str] = Counter()
        with httpx.Client(
            base_url=api_url, timeout=REQUEST_TIMEOUT * stretch, headers=auth(analyst)
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
