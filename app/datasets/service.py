"""Datasets: a validated upload into storage with its noisy row count, reading, deleting rows.

The service owns each request's transaction: it commits what it creates or changes, and on a
failure rolls the session back and removes any rows it stored, so nothing is half-made.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Literal, NamedTuple

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.datasets import repository as repo
from app.datasets import storage
from app.datasets.domain import DomainSpec, check_domain_shape, resolve_domain
from app.kit import repository as kit_repo
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter, NotFound
from app.ledger import service as ledger
from app.ledger.service import BudgetView
from app.models import ApiKey, Dataset
from privclust.privacy import noise

if TYPE_CHECKING:  # the ingest imports pyarrow: loaded by the first upload, not at start-up
    from app.datasets.ingest import IngestedMatrix

log = logging.getLogger("privclust.api")

Relation = Literal["add-remove", "replace-one"]


@dataclass(frozen=True)
class PlanningCount:
    """The row count a dataset's jobs may use, and the neighbouring relation that goes with it."""

    n_rows: int
    relation: Relation


def planning_count(dataset: Dataset) -> PlanningCount:
    """The one place that decides which row count jobs plan with (API and worker alike).

    By default neighbouring datasets differ by adding or removing a row, so the exact N is
    private and jobs use the released N~ (at least 1: a post-processing of N~). When the owner
    declared the count public, N itself is used and jobs are calibrated to replace-one
    neighbours, the relation under which a public N is consistent with the guarantee.
    """
    if dataset.count_public:
        return PlanningCount(n_rows=dataset.n_rows, relation="replace-one")
    return PlanningCount(n_rows=max(dataset.n_rows_dp, 1), relation="add-remove")


def dataset_warnings(dataset: Dataset) -> list[str]:
    """Advice about a dataset's parameters, computed from public values only (N~, delta)."""
    warnings = []
    if dataset.delta > 1.0 / max(dataset.n_rows_dp, 1):
        warnings.append(
            f"delta ({dataset.delta:g}) is above 1/n_rows_dp (n_rows_dp = {dataset.n_rows_dp}); "
            "a delta that large allows mechanisms that publish a few rows outright. The usual "
            "rule of thumb is delta well below 1/n, e.g. 1/n^1.1."
        )
    return warnings


def check_count_options(count_mu: float | None, count_public: bool, mu_cap: float) -> float | None:
    """The GDP cost of the upload's noisy row count: None when the owner declared N public.

    Default: `noise.default_count_mu(mu_cap)`. An owner's `count_mu` must be finite, > 0 and
    strictly below mu_cap (422 `invalid-parameter` naming `count_mu`).
    """
    if count_public:
        if count_mu is not None:
            raise InvalidParameter(
                "count_mu is the cost of the noisy row count; with count_public=true no count is "
                "released, so give one or the other",
                field="count_mu",
            )
        return None
    if count_mu is None:
        chosen, field = noise.default_count_mu(mu_cap), "epsilon"
    else:
        if not math.isfinite(count_mu) or count_mu <= 0.0:
            raise InvalidParameter("count_mu must be a finite number > 0", field="count_mu")
        if count_mu >= mu_cap:
            raise InvalidParameter(
                f"count_mu must be below the dataset's mu_cap ({mu_cap:.6g}), or nothing would "
                "be left for jobs",
                field="count_mu",
            )
        chosen, field = float(count_mu), "count_mu"
    if chosen < 1.0 / noise.MAX_NOISE_STD:
        raise InvalidParameter(
            f"the row count's cost (count_mu={chosen:.3g}) is too small to release: its noise "
            f"would exceed {noise.MAX_NOISE_STD:g}",
            field=field,
        )
    return chosen


@dataclass(frozen=True)
class NewDataset:
    """What an owner asks for with an upload (the file aside), as sent, not yet checked."""

    name: str
    epsilon: float
    delta: float
    domain: DomainSpec
    columns: list[str] | None = None
    count_mu: float | None = None
    count_public: bool = False


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


@dataclass(frozen=True)
class _Terms:
    """What an upload's parameters settle before a byte of the file is read."""

    name: str
    mu_cap: float
    count_mu: float | None


def create_dataset(
    session: Session, owner: ApiKey, new: NewDataset, upload: UploadedFile, settings: Settings
) -> DatasetView:
    """Check everything, store the matrix, release the noisy row count, and record the dataset
    with its budget's first entries (the cap, then the count's cost), committed.

    The row count N~ = N + round(N(0, 1/count_mu^2)) is released once, here, unless the owner
    declares N public (`count_public`). On any error nothing is left behind: no file, no row,
    no ledger entry.
    """
    from app.datasets.ingest import ingest_file  # heavy (pyarrow); only uploads need it

    terms = _check_terms(new)
    dataset_id = uuid.uuid4()
    matrix = ingest_file(
        upload.src,
        filename=upload.filename,
        content_type=upload.content_type,
        dest_dir=settings.datasets_dir,
        columns=new.columns,
        max_bytes=settings.max_upload_bytes,
        name=storage.rows_name(dataset_id),
    )
    try:
        dataset = _record(session, dataset_id, owner, new, terms, matrix)
        # The answer's inputs are read before the commit: if they cannot be, nothing was created.
        created = DatasetView(dataset, ledger.budget(session, dataset))
        session.commit()
    except BaseException:
        session.rollback()
        storage.delete_rows(matrix.path)
        raise
    return created


def _check_terms(new: NewDataset) -> _Terms:
    """The name, the cap and the count's cost, checked before anything is stored."""
    name = new.name.strip()
    if not name or len(name) > 200:
        raise InvalidParameter("name must be 1 to 200 characters", field="name")
    mu_cap = ledger.check_cap(new.epsilon, new.delta)
    count_cost = check_count_options(new.count_mu, new.count_public, mu_cap)
    # The budget the new dataset would show, before a byte is stored: a cap the budget
    # arithmetic cannot represent is refused here, not after the dataset exists.
    opening = ledger.LedgerState(
        mu_cap=mu_cap, dataset_releases=[] if count_cost is None else [count_cost]
    )
    ledger.representable_view(new.epsilon, new.delta, opening)
    check_domain_shape(new.domain)
    return _Terms(name=name, mu_cap=mu_cap, count_mu=count_cost)


def _record(
    session: Session,
    dataset_id: uuid.UUID,
    owner: ApiKey,
    new: NewDataset,
    terms: _Terms,
    matrix: IngestedMatrix,
) -> Dataset:
    """Clip the stored rows into the domain, release the count, and add the dataset's rows."""
    domain = resolve_domain(new.domain, matrix.n_cols)
    box = None if domain.lower is None or domain.upper is None else (domain.lower, domain.upper)
    storage.clip_into_domain(matrix.path, domain.center, domain.radius, box)
    if terms.count_mu is None:
        n_rows_dp = matrix.n_rows
    else:
        # Stored floored at 0 (post-processing); jobs plan with at least 1.
        n_rows_dp = max(noise.release_count(matrix.n_rows, terms.count_mu), 0)
    dataset = Dataset(
        id=dataset_id,
        tenant=owner.tenant,
        name=terms.name,
        n_rows=matrix.n_rows,
        n_rows_dp=n_rows_dp,
        count_public=new.count_public,
        count_mu=terms.count_mu,
        n_cols=matrix.n_cols,
        columns=list(matrix.columns),
        center=domain.center,
        radius=domain.radius,
        domain_kind=domain.kind,
        lower=domain.lower,
        upper=domain.upper,
        epsilon=new.epsilon,
        delta=new.delta,
        mu_cap=terms.mu_cap,
        storage_path=str(matrix.path),
        created_by=owner.id,
    )
    kit_repo.add(session, dataset)
    ledger.open_dataset_budget(session, dataset, owner.id)
    return dataset


def get_dataset(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset:
    dataset = repo.dataset_for_tenant(session, dataset_id, tenant)
    if dataset is None:
        raise NotFound("no such dataset", code="dataset-not-found")
    return dataset


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
    audit trail. The file is removed only once the deletion is committed, so a request that
    fails before its commit leaves the rows where the database says they are."""
    dataset = get_dataset(session, dataset_id, tenant)
    stored = dataset.storage_path
    dataset.storage_path = None
    if dataset.deleted_at is None:
        dataset.deleted_at = utcnow()
    session.flush()
    deleted = DatasetView(dataset, ledger.budget(session, dataset))
    session.commit()
    storage.delete_rows(stored)
    return deleted


def stored_file_names(session: Session) -> set[str]:
    """The names of the files that datasets (deleted ones included) were stored in."""
    return {storage.stored_name(p) for p in repo.dataset_storage_paths(session)}


def remove_abandoned_uploads(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """Delete upload files left by a killed API process (partial ones, and complete ones whose
    dataset was never committed) that have been untouched for an hour, and say so. Run at
    start-up and periodically: a failure is logged, and the next run looks again."""

    def referenced() -> set[str]:
        with sessions() as session:
            return stored_file_names(session)

    try:
        storage.remove_abandoned_uploads(settings.datasets_dir, referenced)
    except (OSError, SQLAlchemyError):
        log.exception("could not look for abandoned uploads in %s", settings.datasets_dir)
