"""Test helpers that build rows through the real services (no mocks of our own parts)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
from sqlalchemy.orm import Session

from app.jobs import service as jobs_service
from app.kit import repository as kit_repo
from app.kit.db.session import session_scope
from app.kit.errors import BudgetExceeded
from app.ledger import service as ledger
from app.models import Dataset

ROOT = Path(__file__).resolve().parents[2]


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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_api(tmp_path: Path, **env_extra: str) -> Iterator[str]:
    """`privclust api` (uvicorn) as a real process on the test's database and Redis (from the
    environment the `settings` fixture set up), with `env_extra` added; yields its base URL."""
    port = _free_port()
    env = {**os.environ, "PRIVCLUST_PORT": str(port), "PRIVCLUST_HOST": "127.0.0.1", **env_extra}
    log_path = tmp_path / "api.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "API did not start\n" + log_path.read_text()
            time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
