"""What a test's service runs on: an empty migrated database, a clean Redis database and the
PRIVCLUST_* environment naming them, for one test (tests/conftest.py) or for the tests of one
module that share a running stack (tests/e2e/conftest.py)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.support.db import TEST_DB_URL


def fresh_database(template: str, directory: Path) -> str:
    """An empty, migrated database: the shared test database emptied, or a copy of the
    migrated SQLite `template` in `directory`."""
    if TEST_DB_URL:
        from app.kit.db.base import Base
        from app.kit.db.session import get_engine

        engine = get_engine(TEST_DB_URL)
        tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        return TEST_DB_URL
    path = directory / "privclust.db"
    shutil.copy(template, path)
    return f"sqlite:///{path}"


@contextlib.contextmanager
def clean_redis(url: str) -> Iterator[str]:
    """The Redis database at `url`, emptied (FLUSHDB) before and after."""
    from redis import Redis

    conn = Redis.from_url(url)
    conn.flushdb()
    try:
        yield url
    finally:
        conn.flushdb()
        conn.close()


def export_service_env(
    monkeypatch: pytest.MonkeyPatch, db_url: str, redis_url: str, data_dir: Path
) -> None:
    """Settings for the test's service, exported as PRIVCLUST_* (the processes it starts and
    the in-process workers read them), with no admin token from the outer environment."""
    env = {
        "PRIVCLUST_DATA_DIR": str(data_dir),
        "PRIVCLUST_DATABASE_URL": db_url,
        "PRIVCLUST_REDIS_URL": redis_url,
        "PRIVCLUST_HEARTBEAT_SECONDS": "0.5",
        "PRIVCLUST_STALE_JOB_SECONDS": "3",
        "PRIVCLUST_QUEUE_NAME": "privclust-test",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PRIVCLUST_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("PRIVCLUST_ADMIN_TOKEN_FILE", raising=False)
