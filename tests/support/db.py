"""Rows and files built or read directly, through the real services (no mocks of our own parts):
the test database and Redis, API keys, datasets with a ledger, admissions, stored files."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.orm import Session

from app.jobs import service as jobs_service
from app.keys.service import create_key
from app.kit import repository as kit_repo
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.kit.config import Settings
from app.kit.db.migrate import alembic_config
from app.kit.db.session import session_scope
from app.kit.errors import BudgetExceeded
from app.ledger import service as ledger
from app.models import Dataset

# Real services to test on (CI sets them); without them the tests use SQLite files and an
# embedded redis-server.
TEST_DB_URL = os.environ.get("PRIVCLUST_TEST_DATABASE_URL") or None
TEST_REDIS_URL = os.environ.get("PRIVCLUST_TEST_REDIS_URL") or None


def make_key(db_url: str, tenant: str, role: str) -> str:
    """A new API key's bearer secret."""
    with session_scope(db_url) as s:
        return create_key(s, tenant=tenant, role=role).secret


def make_dataset(
    db_url: str,
    *,
    mu_cap: float,
    tenant: str = "acme",
    n_rows: int = 1000,
    n_cols: int = 2,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    count_mu: float | None = None,
    n_rows_dp: int | None = None,
) -> uuid.UUID:
    """A dataset row with a ledger (no stored rows: enough for budget tests).

    Without `count_mu` the row count is declared public (no `count` entry); with it, the ledger
    gets the upload's `count` entry and the dataset the noisy count `n_rows_dp`.
    """
    with session_scope(db_url) as s:
        ds = Dataset(
            tenant=tenant,
            name="t",
            n_rows=n_rows,
            n_rows_dp=n_rows if n_rows_dp is None else n_rows_dp,
            count_public=count_mu is None,
            count_mu=count_mu,
            n_cols=n_cols,
            columns=[f"c{i}" for i in range(n_cols)],
            center=[0.0] * n_cols,
            radius=1.0,
            epsilon=epsilon,
            delta=delta,
            mu_cap=mu_cap,
            storage_path=None,
        )
        kit_repo.add(s, ds)
        ledger.open_dataset_budget(s, ds, None)
        return ds.id


def admit(
    session: Session, dataset_id: uuid.UUID, req: jobs_service.JobRequest, *args: Any, **kw: Any
) -> tuple[uuid.UUID, bool] | None:
    """One admission exactly as the API does it (the arguments of `admit_or_refusal`). None
    when a budget refuses (`admit_or_refusal` says which)."""
    admitted = admit_or_refusal(session, dataset_id, req, *args, **kw)
    return None if isinstance(admitted, BudgetExceeded) else admitted


def admit_or_refusal(
    session: Session,
    dataset_id: uuid.UUID,
    req: jobs_service.JobRequest,
    idempotency_key: str | None = None,
    *,
    actor: uuid.UUID | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[uuid.UUID, bool] | BudgetExceeded:
    """One admission exactly as the API does it, by `actor`'s key at `clock`'s time: (the job's
    id, created), or the refusal (the dataset's cap, a key's cap or a pace)."""
    dataset = session.get(Dataset, dataset_id)
    assert dataset is not None
    ledger.begin_budget_transaction(session)
    try:
        job, created = jobs_service.submit(
            session, dataset, req, actor=actor, idempotency_key=idempotency_key, clock=clock
        )
        session.commit()
        return job.id, created
    except BudgetExceeded as refused:
        session.rollback()
        return refused


def admitted_job(db_url: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A dataset (mu cap 2) and one job admitted on it (k = 2, mu = 0.5), never enqueued."""
    dataset_id = make_dataset(db_url, mu_cap=2.0)
    with session_scope(db_url) as s:
        admitted = admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.5))
    assert admitted is not None
    return dataset_id, admitted[0]


def stored_files(settings: Settings) -> list[Path]:
    """The files in the service's datasets directory."""
    d = settings.datasets_dir
    return sorted(d.iterdir()) if d.exists() else []


def database_at(tmp_path: Path, revision: str) -> tuple[str, Config]:
    """A new SQLite database under `tmp_path` migrated to `revision` (to test what a later
    migration makes of it): its URL and its Alembic configuration."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    cfg = alembic_config(url)
    command.upgrade(cfg, revision)
    return url, cfg
