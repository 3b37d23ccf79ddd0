"""Test helpers that build rows through the real services (no mocks of our own parts)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.db import repositories as repo
from app.db.models import Dataset
from app.db.session import session_scope
from app.errors import BudgetExceeded
from app.services import jobs as jobs_service
from app.services import ledger


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
        repo.add(s, ds)
        ledger.open_dataset_budget(s, ds, None)
        return ds.id


def admit(
    session: Session,
    dataset_id: uuid.UUID,
    req: jobs_service.JobRequest,
    idempotency_key: str | None = None,
) -> tuple[uuid.UUID, bool] | None:
    """One admission exactly as the API does it. None when the budget refuses."""
    dataset = session.get(Dataset, dataset_id)
    assert dataset is not None
    ledger.begin_budget_transaction(session)
    try:
        job, created = jobs_service.submit(
            session, dataset, req, actor=None, idempotency_key=idempotency_key
        )
        session.commit()
        return job.id, created
    except BudgetExceeded:
        session.rollback()
        return None
