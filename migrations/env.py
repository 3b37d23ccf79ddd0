"""Alembic environment: the URL comes from privclust Settings unless the caller set one."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app import models  # noqa: F401  (registers the tables on Base.metadata)
from app.kit.config import get_settings
from app.kit.db.base import Base
from app.kit.db.session import make_engine

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite changes a column by rebuilding its table (batch mode: copy, DROP, rename).
            # With foreign keys enforced, dropping a table that other rows reference fails, and
            # the pragma is ignored inside a transaction: switch enforcement off before the
            # migration's transaction begins (SQLite's documented procedure for schema changes)
            # and check every reference before that transaction commits.
            _sqlite_foreign_keys(connection, enabled=False)
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=sqlite,
        )
        try:
            with context.begin_transaction():
                context.run_migrations()
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"migration left broken foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                _sqlite_foreign_keys(connection, enabled=True)
    engine.dispose()


def _sqlite_foreign_keys(connection: Connection, *, enabled: bool) -> None:
    """Set PRAGMA foreign_keys on the driver connection, outside any transaction."""
    driver = connection.connection.driver_connection
    assert driver is not None
    driver.execute(f"PRAGMA foreign_keys={'ON' if enabled else 'OFF'}")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
