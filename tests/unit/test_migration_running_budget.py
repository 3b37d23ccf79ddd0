"""Migration 0004 on a SQLite file: each dataset's running budget is backfilled from a replay of
its ledger, exactly, and the downgrade drops it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

from alembic import command
from sqlalchemy import inspect, text

from app.kit.db.session import make_engine, session_factory
from app.ledger import service as ledger
from app.ledger import verify
from tests.support.db import database_at


def _insert_0003_dataset(
    url: str, entries: list[tuple[str, uuid.UUID | None, float | None]]
) -> uuid.UUID:
    """A dataset and its ledger entries, written with the 0003 schema."""
    dataset_id, now = uuid.uuid4(), datetime.now(UTC)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant, name, n_rows, n_rows_dp, count_public,"
                " count_mu, n_cols, columns, center, radius, epsilon, delta, mu_cap,"
                " storage_path, created_at) VALUES (:id, 'acme', 'old', 1000, 1003, 0, 0.1, 2,"
                " '[\"a\", \"b\"]', '[0, 0]', 1.0, 1.0, 1e-6, 1.0, NULL, :now)"
            ),
            {"id": dataset_id.hex, "now": now},
        )
        for kind, job, mu in entries:
            conn.execute(
                text(
                    "INSERT INTO ledger_entries (dataset_id, kind, job_id, mu, created_at)"
                    " VALUES (:id, :kind, :job, :mu, :now)"
                ),
                {"id": dataset_id.hex, "kind": kind, "job": job and job.hex, "mu": mu, "now": now},
            )
    engine.dispose()
    return dataset_id


def test_upgrade_backfills_the_running_budget_from_the_ledger(tmp_path: Path) -> None:
    url, cfg = database_at(tmp_path, "0003")
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    busy = _insert_0003_dataset(
        url,
        [
            ("cap", None, 0.5),
            ("count", None, 0.1),
            ("reserve", a, 0.3),
            ("commit", a, 0.3),
            ("succeeded", a, None),
            ("reserve", b, 0.2),
            ("reserve", c, 0.25),
            ("refund", c, 0.25),
            ("cancelled", c, None),
            ("cap", None, 1.0),
        ],
    )
    fresh = _insert_0003_dataset(url, [("cap", None, 1.0)])

    command.upgrade(cfg, "head")

    sessions = session_factory(url)
    with sessions() as s:
        running = ledger.running(s, busy)
        assert running.mu_cap == 1.0 and running.jobs == 3
        assert running.spent_sq == Fraction(0.1) ** 2 + Fraction(0.3) ** 2
        assert running.reserved_sq == Fraction(0.2) ** 2
        assert ledger.running(s, fresh) == ledger.RunningBudget(mu_cap=1.0)
    for dataset_id in (busy, fresh):
        check = verify.check(sessions, dataset_id)
        assert check is not None and check.stored == check.replayed, check
        # The chain is whole (0008); the only finding is that these synthetic commits have no
        # job rows, which verify names.
        assert all("there is no such job" in found for found in check.breaks), check.breaks

    command.downgrade(cfg, "0003")
    engine = make_engine(url)
    assert "dataset_budgets" not in inspect(engine).get_table_names()
    engine.dispose()
