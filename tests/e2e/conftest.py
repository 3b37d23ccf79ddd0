"""The end-to-end tests' `stack`: `privclust api` and one RQ worker as real processes (started
as `python -m app.cli ...`) on the test's database and Redis.

`module_stack` is the same for all the tests of one module, for modules whose tests each make
their own keys and datasets and need no empty service (a module says so by taking it as its
`stack`): starting the processes is a large part of what such a test costs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kit.config import Settings
from tests.support.environment import clean_redis, export_service_env, fresh_database
from tests.support.services import Stack, running_stack


def _stack_in(log_dir: Path, database_url: str) -> contextlib.AbstractContextManager[Stack]:
    log_dir.mkdir()
    return running_stack(log_dir, database_url, PRIVCLUST_WORKER_THREADS="1", PYTHONUNBUFFERED="1")


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    with _stack_in(tmp_path / "logs", settings.resolved_database_url) as s:
        yield s


@pytest.fixture(scope="module")
def module_stack(
    _migrated_template: str, _redis_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("stack")
    database_url = fresh_database(_migrated_template, directory)
    with (
        clean_redis(_redis_server) as redis_url,
        pytest.MonkeyPatch.context() as monkeypatch,
    ):
        export_service_env(monkeypatch, database_url, redis_url, directory / "data")
        with _stack_in(directory / "logs", database_url) as s:
            yield s
