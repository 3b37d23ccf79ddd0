"""This machine's PostgreSQL and Redis, for the benchmarks that measure the service on them: a
throwaway database, and a Redis database flushed before and after. Each yields None (and says
so) when the service does not answer, so that a benchmark skips that backend."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

PG_ADMIN_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def bench_redis_url(default_db: int) -> str:
    """BENCH_REDIS_URL, else database `default_db` of this machine's Redis."""
    return os.environ.get("BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{default_db}")


@contextlib.contextmanager
def throwaway_database(prefix: str) -> Iterator[str | None]:
    """A new database on PG_ADMIN_URL's server, named `prefix` with the time and pid: its
    SQLAlchemy URL, dropped (connections and all) at exit."""
    import psycopg

    name = f"{prefix}_{int(time.time())}_{os.getpid()}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        print(f"PostgreSQL not reachable ({type(exc).__name__}: {exc}); skipping it")
        yield None
        return
    host = PG_ADMIN_URL.split("://", 1)[1].rsplit("/", 1)[0]
    try:
        yield f"postgresql+psycopg://{host}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def flushed_redis(url: str) -> Iterator[str | None]:
    """The Redis database at `url`, flushed now and at exit (the benchmarks own theirs)."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).flushdb()
    except Exception as exc:
        print(f"Redis not reachable at {url} ({type(exc).__name__}: {exc}); skipping it")
        yield None
        return
    try:
        yield url
    finally:
        redis.Redis.from_url(url).flushdb()
