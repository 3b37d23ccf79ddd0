"""Engine and session factory; SQLite gets WAL, a busy timeout and real BEGIN IMMEDIATE."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
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
    return create_engine(url, pool_pre_ping=True, **kwargs)


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


def get_engine(url: str, pool_size: int | None = None) -> Engine:
    """One engine per process, URL and pool size; a forked worker gets its own pool.

    `pool_size` None is SQLAlchemy's default pool (5 + 10 overflow), right for workers and the
    CLI. The API passes its thread count: a request thread then never waits for a connection,
    because a request holds a connection only while one of its threads runs.
    """
    key = (os.getpid(), url, pool_size)
    engine = _engines.get(key)
    if engine is None:
        sizing = {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 4}
        engine = make_engine(url, **sizing)
        _engines[key] = engine
    return engine


def session_factory(url: str, pool_size: int | None = None) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url, pool_size), expire_on_commit=False)


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
