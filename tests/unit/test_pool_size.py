"""PRIVCLUST_DB_POOL_SIZE sizes each API process's database pool; unset, one connection for
every thread that can hold one (API_THREADS + UPLOAD_THREADS), as before."""

from __future__ import annotations

from pathlib import Path

from app.kit.config import Settings
from app.kit.db.session import MAX_OVERFLOW


def _pool(settings: Settings) -> tuple[int, int]:
    from app.main import create_app

    pool = create_app(settings).state.sessionmaker.kw["bind"].pool
    return pool.size(), pool._max_overflow


def test_the_pool_is_sized_by_the_threads_unless_set(tmp_path: Path) -> None:
    default = Settings(data_dir=tmp_path, api_threads=10, upload_threads=3)
    assert default.api_pool_size == 13 and _pool(default) == (13, MAX_OVERFLOW)
    chosen = Settings(data_dir=tmp_path, api_threads=10, upload_threads=3, db_pool_size=7)
    assert chosen.api_pool_size == 7 and _pool(chosen) == (7, MAX_OVERFLOW)
