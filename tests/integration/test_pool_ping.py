"""A pooled PostgreSQL connection that died while idle (server restarted) is replaced, not used."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from app.kit.db import session as db_session
from tests.support.db import TEST_DB_URL

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (TEST_DB_URL or "").startswith("postgresql"), reason="needs PostgreSQL"),
]


def test_an_idle_connection_killed_by_the_server_is_replaced(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = db_session.make_engine(db_url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        # What a server restart does to a pooled connection, while it sits idle in the pool.
        admin = db_session.make_engine(db_url, poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            conn.commit()
        monkeypatch.setattr(db_session, "PING_AFTER_IDLE_SECONDS", 0.0)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()
