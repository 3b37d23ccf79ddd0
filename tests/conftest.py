"""Shared fixtures: a real database and a real Redis for every test that needs them.

PRIVCLUST_TEST_DATABASE_URL / PRIVCLUST_TEST_REDIS_URL point the tests at real services (CI
does this with the machine's PostgreSQL and Redis). Without them the tests use SQLite files and
an embedded redis-server started here, so `make test` needs nothing installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.kit.config import Settings, get_settings
from tests.support.db import TEST_DB_URL, TEST_REDIS_URL, make_key
from tests.support.environment import clean_redis, export_service_env, fresh_database
from tests.support.patience import oversubscription
from tests.support.s3 import FakeS3, fake_s3


def pytest_configure(config: pytest.Config) -> None:
    """Tests on a shared PostgreSQL or Redis empty them before each test, so they run in one
    process: refuse pytest-xdist's workers there rather than let two tests empty each other's."""
    workers = getattr(config.option, "numprocesses", None)
    if (TEST_DB_URL or TEST_REDIS_URL) and workers not in (None, 0):
        raise pytest.UsageError(
            "PRIVCLUST_TEST_DATABASE_URL / PRIVCLUST_TEST_REDIS_URL are shared by every test: "
            "run them in one process (-n0; `make test PYTEST_ARGS=-n0`)"
        )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """pytest-timeout's limit (pyproject.toml) is there to stop a hung test, not a slow one: it
    is stretched by how oversubscribed the cores are as the test starts, as the tests' own
    waits are (tests/support/patience.py), so a busy machine does not fail a test that works."""
    marker = item.get_closest_marker("timeout")
    configured = marker.args[0] if marker and marker.args else None
    configured = (
        configured or item.config.getoption("timeout", None) or item.config.getini("timeout")
    )
    if configured:
        stretched = float(configured) * oversubscription()
        item.add_marker(pytest.mark.timeout(stretched), append=False)
    yield


@pytest.fixture(scope="session")
def _migrated_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Run the real migrations once: on the test database, or on a template SQLite file."""
    from app.kit.db.migrate import upgrade_to_head

    if TEST_DB_URL:
        upgrade_to_head(TEST_DB_URL)
        return TEST_DB_URL
    path = tmp_path_factory.mktemp("db") / "template.db"
    url = f"sqlite:///{path}"
    upgrade_to_head(url)
    from app.kit.db.session import get_engine

    get_engine(url).dispose()
    return str(path)


@pytest.fixture
def db_url(_migrated_template: str, tmp_path: Path) -> str:
    """An empty, migrated database for this test."""
    return fresh_database(_migrated_template, tmp_path)


@pytest.fixture(scope="session")
def _redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if TEST_REDIS_URL:
        yield TEST_REDIS_URL
        return
    from app.kit.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), persist=False)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def redis_url(_redis_server: str) -> Iterator[str]:
    """A clean Redis database for this test (FLUSHDB before and after)."""
    with clean_redis(_redis_server) as url:
        yield url


@pytest.fixture
def settings(
    db_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """Settings for this test, also exported as PRIVCLUST_* so in-process workers see them."""
    export_service_env(monkeypatch, db_url, redis_url, tmp_path / "data")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    from app.kit.db.session import session_factory

    s = session_factory(settings.resolved_database_url)()
    try:
        yield s
    finally:
        s.rollback()
        s.close()


@pytest.fixture
def keys(settings: Settings) -> dict[str, str]:
    """Bearer secrets: an admin, and an owner and an analyst of tenant `acme` and `other`."""
    url = settings.resolved_database_url
    return {
        "admin": make_key(url, "admin", "admin"),
        "owner": make_key(url, "acme", "owner"),
        "analyst": make_key(url, "acme", "analyst"),
        "other_owner": make_key(url, "other", "owner"),
    }


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeS3]:
    """A fake S3 endpoint for one test, its address and credentials in the environment."""
    with fake_s3() as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        yield server
