"""An import's state in the database, one committed unit of work per move: the service that the
import's task (app.datasets.imports) calls, so that the task reaches the database only through
it. Every move of an import's state is a compare-and-set (app.datasets.repository), so a
retried, duplicated or swept import cannot move it twice."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from app.datasets import repository as repo
from app.datasets.domain import ResolvedDomain
from app.kit import repository as kit_repo
from app.kit.db.base import utcnow
from app.kit.db.session import unit_of_work
from app.kit.errors import Conflict
from app.ledger import service as ledger
from app.models import Dataset, DatasetStatus
from privclust.clustering.run.options import per_row_mu
from privclust.tabular import TableSpec

if TYPE_CHECKING:  # the ingest imports pyarrow: loaded by the worker's first import
    from app.datasets.ingest import IngestedMatrix


class ImportStopped(Exception):
    """The import was failed or deleted meanwhile: stop, keep nothing."""


def record_accepted(session: Session, dataset: Dataset, owner_id: uuid.UUID) -> None:
    """The accepted import, `importing`, with its budget's cap (nothing charged yet)."""
    kit_repo.add(session, dataset)
    ledger.open_dataset_budget(session, dataset, owner_id, with_count=False)


def unqueued(session: Session, dataset_id: uuid.UUID) -> None:
    """An accepted import that could not be queued: failed, nothing charged."""
    repo.fail_import(session, dataset_id, "the import could not be queued; nothing was charged")


def claim(
    sessions: sessionmaker[Session],
    dataset_id: uuid.UUID,
    now: datetime,
    stale_before: datetime,
    planned: str,
) -> Dataset | None:
    """The dataset, if this run may import it (no other run holds it, nothing charged), its
    rows to be written at `planned`."""
    with unit_of_work(sessions) as session:
        if not repo.claim_import(session, dataset_id, now, stale_before, planned):
            return None
        return session.get(Dataset, dataset_id)


def status(sessions: sessionmaker[Session], dataset_id: uuid.UUID) -> str:
    """The dataset's status ("missing" once deleted for good)."""
    with unit_of_work(sessions) as session:
        dataset = session.get(Dataset, dataset_id)
        return "missing" if dataset is None else dataset.status


def record_progress(
    sessions: sessionmaker[Session], dataset_id: uuid.UUID, fraction: float
) -> bool:
    """The import's progress and heartbeat; False once it is no longer importing (stop)."""
    with unit_of_work(sessions) as session:
        return repo.record_progress(session, dataset_id, fraction, utcnow())


def charge_count(
    sessions: sessionmaker[Session],
    dataset_id: uuid.UUID,
    rows: IngestedMatrix,
    domain: ResolvedDomain,
    counts: dict[str, int] | None = None,
) -> tuple[int, float] | None:
    """Record the stored rows and charge the count, committed; (N, count_mu) for the release
    still to draw, or None when the owner declared the count public (ready now). Raises
    ImportStopped when the import was failed or deleted meanwhile."""
    with unit_of_work(sessions) as session:
        ledger.begin_budget_transaction(session)
        try:
            dataset = ledger.lock_for_admission(session, dataset_id)
        except Conflict as exc:  # deleted meanwhile
            raise ImportStopped() from exc
        if dataset.status != DatasetStatus.IMPORTING or dataset.n_rows is not None:
            raise ImportStopped()
        dataset.n_rows, dataset.n_cols, dataset.columns = rows.n_rows, rows.n_cols, rows.columns
        dataset.ingest_counts = counts
        dataset.center, dataset.radius, dataset.domain_kind = (
            domain.center,
            domain.radius,
            domain.kind,
        )
        dataset.lower, dataset.upper = domain.lower, domain.upper
        dataset.storage_path, dataset.progress, dataset.heartbeat_at = rows.stored, 1.0, utcnow()
        if dataset.count_mu is None:
            dataset.n_rows_dp, dataset.status = rows.n_rows, DatasetStatus.READY
            return None
        ledger.charge_count(session, dataset, dataset.created_by)
        # A unit of m rows moves the count by up to m: released at the per-row count_mu / m.
        bound = TableSpec.of(dataset.table_spec).contribution_bound
        return rows.n_rows, per_row_mu(dataset.count_mu, bound)


def record_release(sessions: sessionmaker[Session], dataset_id: uuid.UUID, n_rows_dp: int) -> None:
    """The released row count, recorded once: the dataset is ready."""
    with unit_of_work(sessions) as session:
        repo.release_import(session, dataset_id, n_rows_dp, utcnow())


def fail(sessions: sessionmaker[Session], dataset_id: uuid.UUID, reason: str) -> str | None:
    """Mark the import failed with `reason` (committed); where its rows were written, to
    delete, if anywhere."""
    with unit_of_work(sessions) as session:
        failed = repo.fail_import(session, dataset_id, reason)
    return None if failed is None else failed.storage_path


def was_charged(sessions: sessionmaker[Session], dataset_id: uuid.UUID) -> bool:
    """Whether the import's row count was charged (its rows were recorded)."""
    with unit_of_work(sessions) as session:
        dataset = session.get(Dataset, dataset_id)
        return dataset is not None and dataset.n_rows is not None


def stopped_and_waiting(
    sessions: sessionmaker[Session], heartbeat_before: datetime, created_before: datetime
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """The imports whose worker has been silent since `heartbeat_before` (it stopped), and
    those that no worker has started since `created_before`."""
    with unit_of_work(sessions) as session:
        return (
            repo.stale_imports(session, heartbeat_before),
            repo.waiting_imports(session, created_before),
        )
