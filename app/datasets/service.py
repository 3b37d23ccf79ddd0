"""Datasets: a validated upload into storage with its noisy row count, an import by
reference (app.datasets.imports), reading, deleting rows.

The service owns each request's transaction: it commits what it creates or changes, and on a
failure rolls the session back and removes any rows it stored, so nothing is half-made.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Literal, NamedTuple

from sqlalchemy.orm import Session, sessionmaker

from app.datasets import federated, imports, storage
from app.datasets import repository as repo
from app.datasets.domain import DomainClip, ResolvedDomain
from app.datasets.table_terms import owner_counts, release_count, stored_domain
from app.datasets.terms import NewDataset, Terms, check_count_options, check_terms, dataset_row
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.kit.errors import DatasetNotReady
from app.ledger import service as ledger
from app.ledger.service import BudgetView
from app.models import ApiKey, Dataset, DatasetStatus
from privclust.tabular import TableSpec

if TYPE_CHECKING:  # the ingest imports pyarrow: loaded by the first upload, not at start-up
    from app.datasets.ingest import IngestedMatrix

__all__ = ["NewDataset", "check_count_options"]  # re-exported: the endpoints build requests

log = logging.getLogger("privclust.api")

Relation = Literal["add-remove", "replace-one"]


@dataclass(frozen=True)
class PlanningCount:
    """The row count a dataset's jobs may use, and the neighbouring relation that goes with it."""

    n_rows: int
    relation: Relation
    # m: the most rows one unit of privacy has (1: the unit is a row); every release of the
    # dataset's jobs is calibrated for it (privclust.clustering.run.options.per_row_options).
    contribution_bound: int = 1


def relation_of(dataset: Dataset) -> Relation:
    """The neighbouring relation a dataset's guarantee is stated for."""
    return "replace-one" if dataset.count_public else "add-remove"


def is_ready(dataset: Dataset) -> bool:
    """Whether the dataset's rows are stored and its count released (a dataset built in memory
    has no status until it is flushed: its counts decide)."""
    unfinished = dataset.status in (DatasetStatus.IMPORTING, DatasetStatus.FAILED)
    return not unfinished and dataset.n_rows_dp is not None


def require_ready(dataset: Dataset) -> None:
    """409 `dataset-not-ready` unless the dataset's rows are stored and its count released.

    The refusal reaches analysts, so it says only which state the dataset is in: an import's
    progress grows with the source's size and its exact row count (the owner reads `progress`
    on the dataset), and no refusal is charged."""
    if is_ready(dataset):
        return
    state = "still importing" if dataset.status == DatasetStatus.IMPORTING else "its import failed"
    raise DatasetNotReady(
        f"the dataset is not ready: {state}; nothing was charged",
        dataset_id=str(dataset.id),
        dataset_status=dataset.status,
    )


def planning_count(dataset: Dataset) -> PlanningCount:
    """The one place that decides which row count jobs plan with (API and worker alike).

    By default neighbouring datasets differ by adding or removing a row, so the exact N is
    private and jobs use the released N~ (at least 1: a post-processing of N~). When the owner
    declared the count public, N itself is used and jobs are calibrated to replace-one
    neighbours, the relation under which a public N is consistent with the guarantee.
    A dataset that is not ready has no count to plan with: 409 `dataset-not-ready`.
    """
    require_ready(dataset)
    assert dataset.n_rows_dp is not None
    bound = TableSpec.of(dataset.table_spec).contribution_bound
    if dataset.count_public:
        assert dataset.n_rows is not None
        n_rows = dataset.n_rows
    else:
        # A federated dataset has no exact count anywhere: only its released N~.
        n_rows = max(dataset.n_rows_dp, 1)
    return PlanningCount(n_rows=n_rows, relation=relation_of(dataset), contribution_bound=bound)


def dataset_warnings(dataset: Dataset) -> list[str]:
    """Advice about a dataset's parameters, computed from public values only (N~, delta)."""
    warnings: list[str] = []
    if dataset.n_rows_dp is None:
        return warnings
    if dataset.delta > 1.0 / max(dataset.n_rows_dp, 1):
        warnings.append(
            f"delta ({dataset.delta:g}) is above 1/n_rows_dp (n_rows_dp = {dataset.n_rows_dp}); "
            "a delta that large allows mechanisms that publish a few rows outright. The usual "
            "rule of thumb is delta well below 1/n, e.g. 1/n^1.1."
        )
    return warnings


@dataclass(frozen=True)
class UploadedFile:
    """The upload's body as the request received it (read in chunks, never whole)."""

    src: BinaryIO
    filename: str | None
    content_type: str | None


class DatasetView(NamedTuple):
    """A dataset and its budget: what the API shows of it."""

    dataset: Dataset
    budget: BudgetView


def create_dataset(
    session: Session, owner: ApiKey, new: NewDataset, upload: UploadedFile, settings: Settings
) -> DatasetView:
    """Check everything, store the rows (clipped into the declared domain as they are written),
    release the noisy row count, and record the dataset with its budget's first entries (the
    cap, then the count's cost), committed.

    The row count N~ = N + round(N(0, 1/count_mu^2)) is released once, here, unless the owner
    declares N public (`count_public`). On any error nothing is left behind: no rows, no
    dataset, no ledger entry; object storage that cannot be reached is a 503.
    """
    from app.datasets.ingest import (
        TableIngest,
        ingest_file,  # heavy (pyarrow); only uploads need it
    )

    terms = check_terms(new)
    dataset_id = uuid.uuid4()
    clip = DomainClip(stored_domain(new.domain, new.table))
    table = TableIngest(new.table, new.domain)
    writer = storage.new_rows_writer(
        settings.resolved_storage_url,
        storage.rows_name(dataset_id),
        partition_rows=settings.partition_rows,
        clip=clip,
        scratch=settings.datasets_dir,
    )
    matrix = ingest_file(
        upload.src,
        filename=upload.filename,
        content_type=upload.content_type,
        dest_dir=settings.datasets_dir,
        columns=new.columns,
        max_bytes=settings.max_upload_bytes,
        writer=writer,
        table=table,
    )
    try:
        assert clip.domain is not None
        dataset = _record(session, dataset_id, owner, new, terms, matrix, clip.domain)
        dataset.ingest_counts = owner_counts(table.counts, new.table)
        # The answer's inputs are read before the commit: if they cannot be, nothing was created.
        created = DatasetView(dataset, ledger.budget(session, dataset))
        session.commit()
    except BaseException:
        session.rollback()
        storage.delete_rows(matrix.stored)
        raise
    return created


def import_dataset(
    session: Session, owner: ApiKey, new: NewDataset, source: str, settings: Settings
) -> DatasetView:
    """Accept an import by reference: the dataset, `importing`, with its cap (nothing charged
    yet); a worker copies the rows and then releases the count (app.datasets.imports)."""
    dataset = imports.accept_import(session, owner, new, source, settings)
    return DatasetView(dataset, ledger.budget(session, dataset))


def _record(
    session: Session,
    dataset_id: uuid.UUID,
    owner: ApiKey,
    new: NewDataset,
    terms: Terms,
    matrix: IngestedMatrix,
    domain: ResolvedDomain,
) -> Dataset:
    """Release the count of the stored (clipped) rows, and add the dataset's rows."""
    if terms.count_mu is None:
        n_rows_dp = matrix.n_rows
    else:
        # Stored floored at 0 (post-processing); jobs plan with at least 1.
        # Per unit of privacy: a unit of m rows moves the count by up to m.
        n_rows_dp = max(release_count(matrix.n_rows, terms.count_mu, new.table), 0)
    dataset = dataset_row(
        dataset_id,
        owner,
        new,
        terms,
        domain,
        n_rows=matrix.n_rows,
        n_rows_dp=n_rows_dp,
        n_cols=matrix.n_cols,
        columns=list(matrix.columns),
        storage_path=matrix.stored,
        status=DatasetStatus.READY,
    )
    kit_repo.add(session, dataset)
    ledger.open_dataset_budget(session, dataset, owner.id)
    return dataset


def create_federated_dataset(
    session: Session,
    owner: ApiKey,
    new: NewDataset,
    members: str,
    colluding: int,
    settings: Settings,
) -> DatasetView:
    """A federated dataset (app.datasets.federated), ready with its noisy row count."""
    addresses = federated.parse_members(members)
    dataset = federated.create_federated(session, owner, new, addresses, colluding, settings)
    return DatasetView(dataset, ledger.budget(session, dataset))


def get_dataset(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset:
    """The tenant's dataset (deleted ones included), or NotFound: the ledger's lookup, which
    owns the rows whose budget it keeps."""
    return ledger.tenant_dataset(session, dataset_id, tenant)


def view_dataset(session: Session, dataset_id: uuid.UUID, tenant: str) -> DatasetView:
    dataset = get_dataset(session, dataset_id, tenant)
    return DatasetView(dataset, ledger.budget(session, dataset))


def list_datasets(
    session: Session, tenant: str, limit: int, cursor: str | None
) -> tuple[list[DatasetView], str | None]:
    """A page of the tenant's datasets with their budgets, and the next page's cursor."""
    items, nxt = repo.list_datasets(session, tenant, limit, cursor)
    budgets = ledger.budgets(session, items)  # one query for the page
    return [DatasetView(d, budgets[d.id]) for d in items], nxt


def delete_rows(session: Session, dataset_id: uuid.UUID, tenant: str) -> DatasetView:
    """Delete a dataset's stored rows; metadata, ledger and released results stay for the
    audit trail. The rows are removed only once the deletion is committed, so a request that
    fails before its commit leaves the rows where the database says they are. An import still
    running is failed (its worker stops and removes what it wrote)."""
    dataset = get_dataset(session, dataset_id, tenant)
    stored = dataset.storage_path
    dataset.storage_path = None
    if dataset.deleted_at is None:
        dataset.deleted_at = utcnow()
    if dataset.status == DatasetStatus.IMPORTING:
        dataset.status = DatasetStatus.FAILED
        dataset.failure_reason = "the dataset was deleted before its import finished"
    session.flush()
    deleted = DatasetView(dataset, ledger.budget(session, dataset))
    session.commit()
    storage.delete_rows(stored)
    return deleted


def stored_file_names(session: Session) -> set[str]:
    """The names of the rows that datasets (deleted ones included) were stored under."""
    return {storage.stored_name(p) for p in repo.dataset_storage_paths(session)}


def remove_abandoned_uploads(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """Delete rows left by a killed process (partial uploads, and complete ones whose dataset
    was never committed) that have been untouched for an hour, and say so; then fail imports
    whose worker stopped and enqueue again those whose queue entry was lost. Run at start-up
    and periodically: a failure is logged, and the next run looks again."""

    def referenced() -> set[str]:
        with sessions() as session:
            return stored_file_names(session)

    where = settings.resolved_storage_url

    def remove() -> None:
        if not _removing.acquire(blocking=False):
            return  # the previous look is still going (a slow store)
        try:
            storage.remove_abandoned_rows(where, settings.datasets_dir, referenced)
        except Exception as exc:  # a store or database that is down: the next run looks again
            log.warning("could not look for abandoned uploads in %s: %r", where, exc)
        finally:
            _removing.release()

    if storage.is_remote(where):
        # Listing a store may wait for it (seconds while it is down): never hold up the API's
        # start or the sweeper's other duties for it.
        threading.Thread(target=remove, name="abandoned-rows", daemon=True).start()
    else:
        remove()
    try:
        imports.sweep_imports(settings, sessions)
    except Exception:
        log.exception("could not look for imports whose worker stopped")


_removing = threading.Lock()
