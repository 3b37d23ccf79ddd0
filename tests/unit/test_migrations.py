"""Migration 0002 on a SQLite file: existing datasets are backfilled as declared-public counts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from sqlalchemy import text

from app.datasets.service import planning_count
from app.kit.db.migrate import alembic_config
from app.kit.db.session import make_engine, session_factory
from app.models import Dataset
from tests.support.db import database_at


def _insert_0001_rows(url: str) -> uuid.UUID:
    """A dataset with a ledger entry and a job, written with the 0001 schema."""
    dataset_id, job_id, now = uuid.uuid4(), uuid.uuid4(), datetime.now(UTC)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant, name, n_rows, n_cols, columns, center, radius,"
                " epsilon, delta, mu_cap, storage_path, created_at) VALUES (:id, 'acme', 'old',"
                " 1234, 2, '[\"a\", \"b\"]', '[0, 0]', 1.0, 1.0, 1e-6, 0.23, NULL, :now)"
            ),
            {"id": dataset_id.hex, "now": now},
        )
        conn.execute(
            text(
                "INSERT INTO ledger_entries (dataset_id, kind, mu, created_at)"
                " VALUES (:id, 'cap', 0.23, :now)"
            ),
            {"id": dataset_id.hex, "now": now},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, dataset_id, tenant, algorithm, k, params, mu, epsilon,"
                " delta, sigma, releases, iterations, status, progress_iteration,"
                " progress_total, cancel_requested, created_at) VALUES (:job, :id, 'acme',"
                " 'pe-means', 2, '{}', 0.1, 0.5, 1e-6, 50.0, 5, 5, 'succeeded', 5, 5, 0, :now)"
            ),
            {"job": job_id.hex, "id": dataset_id.hex, "now": now},
        )
    engine.dispose()
    return dataset_id


def test_upgrade_from_0001_backfills_existing_datasets(tmp_path: Path) -> None:
    url, cfg = database_at(tmp_path, "0001")
    dataset_id = _insert_0001_rows(url)

    # The datasets table is rebuilt under rows that reference it (jobs, ledger entries).
    command.upgrade(cfg, "head")

    engine = make_engine(url)
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT n_rows, n_rows_dp, count_public, count_mu, status FROM datasets")
        ).one()
        assert tuple(row) == (1234, 1234, 1, None, "ready")  # uploaded whole: ready (0007)
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 1
        assert conn.execute(text("SELECT count(*) FROM ledger_entries")).scalar() == 1
        assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        columns = {r[1]: r for r in conn.execute(text("PRAGMA table_info(datasets)"))}
        assert columns["count_public"][3] == 1  # NOT NULL
        assert columns["n_rows_dp"][3] == 0  # null while an import has not released it (0007)
        assert columns["count_mu"][3] == 0
    engine.dispose()

    # The published N was already shown to analysts: jobs now run under replace-one.
    session = session_factory(url)()
    try:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        count = planning_count(dataset)
        assert (count.n_rows, count.relation) == (1234, "replace-one")
    finally:
        session.close()
        session.get_bind().dispose()


def test_downgrade_to_0001_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.db'}"
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")
    command.downgrade(cfg, "0001")
    engine = make_engine(url)
    with engine.connect() as conn:
        names = {r[1] for r in conn.execute(text("PRAGMA table_info(datasets)"))}
    engine.dispose()
    assert "n_rows_dp" not in names and "n_rows" in names
    command.upgrade(cfg, "head")
