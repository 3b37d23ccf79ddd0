"""GET and HEAD requests read through sessions that cannot write (autocommit on PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.kit.db import session as db_session
from app.models import ApiKey

pytestmark = pytest.mark.integration


def test_a_read_session_reads_but_refuses_to_write(db_url: str) -> None:
    factory = db_session.read_session_factory(db_url)
    with factory() as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
        session.add(ApiKey(tenant="t", role="analyst", key_hash="0" * 64, prefix="pck_x"))
        with pytest.raises(RuntimeError, match="read-only request tried to write"):
            session.flush()
        session.rollback()
    with db_session.session_factory(db_url)() as session:
        assert session.query(ApiKey).filter_by(tenant="t").count() == 0


def test_reads_on_postgresql_run_without_begin_and_commit(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("autocommit reads are for PostgreSQL; SQLite keeps one read transaction")
    with db_session.read_session_factory(db_url)() as session:
        session.execute(text("SELECT 1"))
        # After a statement in a transaction the connection would be INTRANS.
        status = session.connection().connection.dbapi_connection.info.transaction_status
        assert status.name == "IDLE"
