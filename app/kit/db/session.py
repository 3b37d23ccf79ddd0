"""Engine and session factory; SQLite gets WAL, a busy timeout and real BEGIN IMMEDIATE."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

IMMEDIATE = {"privclust_immediate": True}
"""Execution options that make a SQLite transaction take the write lock at BEGIN."""


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for `url`; keyword arguments (e.g. pool_size) go to `create_engine`."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        _configure_sqlite(engine)
        return engine
    engine = create_engine(url, **kwargs)
    _ping_when_idle(engine)
    return engine


PING_AFTER_IDLE_SECONDS = 10.0


def _ping_when_idle(engine: Engine) -> None:
    """Test a pooled connection before use if it sat idle for a while (the server may have
    restarted since); replace it if it is dead.

    SQLAlchemy's pool_pre_ping does this on every checkout: a round trip per checkout that cost
    about a third of the polling throughput on PostgreSQL. A connection in steady use needs no
    test: if the server goes away under load, the statement that finds out fails (503) and
    SQLAlchemy replaces every connection of the pool that is older than that failure.
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["privclust_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("privclust_idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards this connection and checks out (or opens) another.
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, emit BEGIN so that we can choose IMMEDIATE.
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get("privclust_immediate"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


_engines: dict[tuple[int, str, int | None], Engine] = {}

# Connections an API process's pool may open beyond its size, at a spike (the sweeper, a burst).
MAX_OVERFLOW = 4


def get_engine(url: str, pool_size: int | None = None) -> Engine:
    """One engine per process, URL and pool size; a forked worker gets its own pool.

    `pool_size` None is SQLAlchemy's default pool (5 + 10 overflow), right for workers and the
    CLI. The API passes `Settings.api_pool_size`, by default its thread count: a request thread
    then never waits for a connection, because a request holds a connection only while one of
    its threads runs. Up to MAX_OVERFLOW more are opened at a spike, so one API process may
    hold pool_size + MAX_OVERFLOW connections.
    """
    key = (os.getpid(), url, pool_size)
    engine = _engines.get(key)
    if engine is None:
        sizing = {} if pool_size is None else {"pool_size": pool_size, "max_overflow": MAX_OVERFLOW}
        engine = make_engine(url, **sizing)
        _engines[key] = engine
    return engine


def session_factory(url: str, pool_size: int | None = None) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url, pool_size), expire_on_commit=False)


def read_session_factory(url: str, pool_size: int | None = None) -> sessionmaker[Session]:
    """Sessions for requests that only read; they may not write (a flush raises).

    On PostgreSQL their statements run in autocommit mode: a read of two statements then takes
    two round trips instead of four (BEGIN and COMMIT add nothing to reads at READ COMMITTED,
    where each statement sees its own snapshot anyway). Same pool as `session_factory`.
    SQLite keeps its transaction, which there is free and gives the reads one snapshot.
    """
    engine = get_engine(url, pool_size)
    bind = (
        engine
        if url.startswith("sqlite")
        else engine.execution_options(isolation_level="AUTOCOMMIT")
    )
    factory = sessionmaker(bind=bind, expire_on_commit=False)

    @event.listens_for(factory, "before_flush")
    def _refuse_writes(session: Session, _context: Any, _instances: Any) -> None:
        if session.new or session.dirty or session.deleted:
            raise RuntimeError("a read-only request tried to write to the database")

    return factory


def finish(session: Session, *, failed: bool) -> None:
    """End a unit of work: commit it (or roll it back if it failed), then close the session.

    Closing returns the session's connection to the pool; the objects it loaded stay readable.
    """
    try:
        if failed:
            session.rollback()
        else:
            session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any error."""
    session = factory()
    try:
        yield session
    except BaseException:
        finish(session, failed=True)
        raise
    finish(session, failed=False)


def session_scope(url: str) -> AbstractContextManager[Session]:
    """A unit of work outside HTTP (worker, CLI) on the database at `url`."""
    return unit_of_work(session_factory(url))
