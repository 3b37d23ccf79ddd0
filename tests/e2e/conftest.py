"""The end-to-end tests' `stack`: `privclust api` and one RQ worker as real processes (started
as `python -m app.cli ...`) on the test's database and Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kit.config import Settings
from tests.support.services import Stack, running_stack


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    with running_stack(
        log_dir, settings.resolved_database_url, PRIVCLUST_WORKER_THREADS="1", PYTHONUNBUFFERED="1"
    ) as s:
        yield s
