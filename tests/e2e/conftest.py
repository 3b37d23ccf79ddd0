"""The end-to-end tests' `stack`: `privclust api` and one RQ worker as real processes (started
as `python -m app.cli ...`) on the test's database and Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kit.config import Settings
from tests.support.db import make_key
from tests.support.processes import stop
from tests.support.services import Stack, running_api


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    with running_api(log_dir, PRIVCLUST_WORKER_THREADS="1", PYTHONUNBUFFERED="1") as api:
        s = Stack(
            base_url=api.base_url,
            env=api.env,
            log_dir=log_dir,
            api=api.proc,
            admin_key=make_key(settings.resolved_database_url, "admin", "admin"),
        )
        try:
            s.start_worker()
            yield s
        finally:
            for worker in s.workers:
                stop(worker)
