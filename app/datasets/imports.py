"""Importing a dataset by reference: accepted by the API, copied and counted by a worker.

The API checks the request (the terms, and the source against the operator's allow-list:
app.datasets.sources), records the dataset as `importing` with its budget's cap (nothing
charged yet) and enqueues `worker.imports.run_import` after the commit, under a deterministic
RQ id. The worker then, in this order:
1. claims the import (compare-and-set: a duplicated or retried RQ job finds it taken);
2. reads the source in row batches, checks every value as an upload does, clips the rows into
   the declared domain and writes the service's own copy into storage, reporting progress;
3. charges the noisy row count (the ledger's `count` entry) under the dataset's budget lock
   and COMMITS, recording the exact count with the rows;
4. only then draws the noise and records the released count: the dataset is `ready`.
A count is charged once and drawn at most once: a dataset charged in step 3 is never claimed
again, and if the worker dies before step 4 the sweep fails the import, charged, with no
count ever released (a job that drew noise is never re-run either). Any failure before step 3
charges nothing; the rows written are deleted and the reason recorded (never a value read).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from redis import Redis
from rq.exceptions import NoSuchJobError
from rq.job import Job as RqJob
from rq.job import JobStatus
from rq.serializers import JSONSerializer
from rq.timeouts import JobTimeoutException
from sqlalchemy.orm import Session, sessionmaker

from app.datasets import import_state, sources, storage
from app.datasets.domain import DomainClip, DomainSpec, ResolvedDomain, resolve_domain
from app.datasets.import_state import ImportStopped
from app.datasets.table_terms import owner_counts, stored_domain
from app.datasets.terms import NewDataset, check_terms, dataset_row
from app.kit import queue
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.kit.errors import PrivclustError, ServiceUnavailable
from app.models import ApiKey, Dataset, DatasetStatus, DomainKind
from privclust.privacy import noise
from privclust.tabular import TableSpec

if TYPE_CHECKING:  # the ingest imports pyarrow: loaded by the worker's first import
    from app.datasets.ingest import IngestedMatrix

log = logging.getLogger("privclust.imports")

TASK = "worker.imports.run_import"
STALE_IMPORT_SECONDS = 600.0  # an import whose worker is silent this long has stopped


def rq_job_id(dataset_id: uuid.UUID) -> str:
    return f"import-{dataset_id}"


# --------------------------------------------------------------------------------------------
# The API: accept and enqueue


def accept_import(
    session: Session, owner: ApiKey, new: NewDataset, raw_source: str, settings: Settings
) -> Dataset:
    """Check an import request, record the dataset as `importing` with its cap, commit and
    enqueue it. Refusals (422, 403, a queue that is down: 503) create and charge nothing."""
    terms = check_terms(new)
    source = sources.check_source(raw_source, settings)
    declared = _declared(new)
    # Refuse cleanly while the queue is down, before anything is created (no transaction
    # is held while the ping waits).
    session.commit()
    queue.redis_connection(queue.resolve_redis_url(settings)).ping()
    dataset = dataset_row(
        uuid.uuid4(),
        owner,
        new,
        terms,
        declared,
        n_rows=None,
        n_rows_dp=None,
        n_cols=0,
        columns=list(new.columns or []),
        storage_path=None,
        status=DatasetStatus.IMPORTING,
        source=source.url,
        progress=0.0,
    )
    import_state.record_accepted(session, dataset, owner.id)
    session.commit()
    try:
        enqueue(settings, dataset.id)
    except Exception as exc:
        import_state.unqueued(session, dataset.id)
        session.commit()
        raise ServiceUnavailable(
            "the job queue could not be reached; the import was not started and nothing was "
            "charged",
            code="queue-unavailable",
            dataset_id=str(dataset.id),
        ) from exc
    return dataset


def _declared(new: NewDataset) -> ResolvedDomain:
    """The domain as far as the request tells it: resolved when its width is known (declared
    `columns`, a box, or a centre: a mismatch among them is a 422 now), else a ball whose
    centre is settled once the source's columns are read."""
    spec = new.domain
    # With table terms the bounds are the numeric columns' only: `columns` may name others.
    named = None if not new.table.plain else new.columns
    width = next((len(v) for v in (named, spec.lower, spec.center) if v is not None), None)
    if width is not None:
        return resolve_domain(spec, width)
    assert spec.radius is not None
    return ResolvedDomain(DomainKind.BALL, [], float(spec.radius))


def enqueue(settings: Settings, dataset_id: uuid.UUID) -> None:
    """The import's RQ job, on the plain queue every worker reads (ids only; state lives in
    the database)."""
    queue.enqueue_task(
        settings, queue.get_queue(settings), TASK, str(dataset_id), rq_job_id(dataset_id)
    )


# --------------------------------------------------------------------------------------------
# The worker: copy, charge, release


def run_import(
    settings: Settings,
    sessions: sessionmaker[Session],
    dataset_id: uuid.UUID,
    keepalive: Callable[[], None] | None = None,
) -> str:
    """Run an import (see the module's docstring); returns the dataset's status after it."""
    dataset = _claim(settings, sessions, dataset_id)
    if dataset is None:
        return import_state.status(sessions, dataset_id)
    try:
        matrix, domain = _copy(settings, sessions, dataset, keepalive)
    except ImportStopped:
        return import_state.status(sessions, dataset_id)
    except Exception as exc:
        return fail(sessions, dataset_id, failure_reason(exc))
    try:
        charged = import_state.charge_count(
            sessions, dataset_id, matrix, domain, dataset.ingest_counts
        )
    except ImportStopped:
        storage.delete_rows(matrix.stored)
        return import_state.status(sessions, dataset_id)
    except Exception as exc:
        return fail(sessions, dataset_id, failure_reason(exc))
    if charged is not None:
        n_rows, count_mu = charged
        # The charge is committed: now, and only now, the noise is drawn, once.
        n_rows_dp = max(noise.release_count(n_rows, count_mu), 0)
        import_state.record_release(sessions, dataset_id, n_rows_dp)
    return import_state.status(sessions, dataset_id)


def _claim(
    settings: Settings, sessions: sessionmaker[Session], dataset_id: uuid.UUID
) -> Dataset | None:
    """The dataset, if this run may import it (no other run holds it, nothing charged)."""
    planned = storage.rows_location(settings.resolved_storage_url, dataset_id.hex)
    now = utcnow()
    stale = now - timedelta(seconds=_stale_seconds(settings))
    dataset = import_state.claim(sessions, dataset_id, now, stale, planned)
    if dataset is None:
        return None
    # A run that stopped before (its worker died) may have left rows there.
    storage.delete_rows(planned)
    return dataset


def _stale_seconds(settings: Settings) -> float:
    return max(STALE_IMPORT_SECONDS, settings.stale_job_seconds)


class _Beat:
    """The progress callback: records progress and the heartbeat at most every `every`
    seconds, and stops the import (ImportStopped) once it was failed or deleted."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        dataset_id: uuid.UUID,
        every: float,
        keepalive: Callable[[], None] | None,
    ) -> None:
        self.sessions, self.dataset_id, self.every = sessions, dataset_id, every
        self.keepalive = keepalive
        self.last = time.monotonic()

    def __call__(self, fraction: float) -> None:
        if time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        if self.keepalive is not None:
            self.keepalive()
        if not import_state.record_progress(self.sessions, self.dataset_id, fraction):
            raise ImportStopped()


def _copy(
    settings: Settings,
    sessions: sessionmaker[Session],
    dataset: Dataset,
    keepalive: Callable[[], None] | None,
) -> tuple[IngestedMatrix, ResolvedDomain]:
    """Read the source into the service's storage, checked and clipped; the rows stored and
    the domain resolved for their width."""
    from app.datasets.ingest import IngestedMatrix, TableIngest
    from app.datasets.ingest.source import import_parquet, list_files
    from app.datasets.ingest.tabular import import_table

    assert dataset.source is not None
    table = TableSpec.of(dataset.table_spec)
    clip = DomainClip(stored_domain(_spec_of(dataset), table))
    writer = storage.new_rows_writer(
        settings.resolved_storage_url,
        storage.rows_name(dataset.id),
        partition_rows=settings.partition_rows,
        clip=clip,
    )
    beat = _Beat(sessions, dataset.id, settings.heartbeat_seconds, keepalive)
    try:
        sources.check_readable(dataset.source, settings)  # the settings may have changed
        files = list_files(dataset.source)

        def check(url: str) -> None:
            sources.check_readable(url, settings)

        wanted = list(dataset.columns) or None
        if table.plain:
            columns = import_parquet(files, wanted, writer, beat, check_file=check)
        else:
            shaping = TableIngest(table, _spec_of(dataset))
            columns = import_table(files, wanted, shaping, writer, beat, check)
            dataset.ingest_counts = owner_counts(shaping.counts, table)
        writer.commit()
    except BaseException:
        writer.discard()
        raise
    assert clip.domain is not None
    rows = IngestedMatrix(writer.stored, writer.n_rows, len(columns), columns)
    return rows, clip.domain


def _spec_of(dataset: Dataset) -> DomainSpec:
    """The domain the owner declared, as recorded when the import was accepted."""
    if dataset.domain_kind == DomainKind.BOX:
        return DomainSpec(lower=list(dataset.lower or []), upper=list(dataset.upper or []))
    return DomainSpec(radius=dataset.radius, center=list(dataset.center) or None)


def fail(sessions: sessionmaker[Session], dataset_id: uuid.UUID, reason: str) -> str:
    """Mark the import failed with `reason` (committed), then delete the rows it wrote."""
    written = import_state.fail(sessions, dataset_id, reason)
    if written:
        storage.delete_rows(written)
    return import_state.status(sessions, dataset_id)


def failure_reason(exc: BaseException) -> str:
    """Why an import failed, in words: what the checks said (they name the file, row and
    column, never a value), else what kind of failure it was."""
    if isinstance(exc, PrivclustError):
        return exc.detail
    if isinstance(exc, JobTimeoutException):
        return "the import ran longer than the worker's time limit (PRIVCLUST_JOB_TIMEOUT_SECONDS)"
    if isinstance(exc, FileNotFoundError):
        return "the source does not exist (or no longer does)"
    if isinstance(exc, PermissionError):
        return "the worker may not read the source"
    log.error("import failed", exc_info=exc)
    return f"the source could not be read ({type(exc).__name__})"


# --------------------------------------------------------------------------------------------
# The sweep (run by the API's sweeper): imports whose worker died, and lost queue entries


def sweep_imports(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """Fail the imports whose worker stopped (charged if it had charged the count: the count
    is never drawn again), and enqueue again those waiting whose queue entry was lost."""
    now = utcnow()
    stale, waiting = import_state.stopped_and_waiting(
        sessions,
        now - timedelta(seconds=_stale_seconds(settings)),
        now - timedelta(seconds=settings.stale_job_seconds),
    )
    for dataset_id in stale:
        reason = (
            "the worker running this import stopped after the row count was charged; no count "
            "was released and none will be: import the source again as a new dataset"
            if import_state.was_charged(sessions, dataset_id)
            else "the worker running this import stopped; nothing was charged"
        )
        fail(sessions, dataset_id, reason)
        log.warning("import of dataset %s failed: its worker stopped", dataset_id)
    if waiting:
        conn = queue.redis_connection(queue.resolve_redis_url(settings))
        for dataset_id in waiting:
            if _in_queue(conn, dataset_id):
                continue
            enqueue(settings, dataset_id)
            log.warning("import of dataset %s enqueued again: its queue entry was lost", dataset_id)


def _in_queue(conn: Redis, dataset_id: uuid.UUID) -> bool:
    """Whether the import's RQ job still waits or runs (not lost, and not ended before it
    could claim the import, e.g. while the database was down)."""
    try:
        job = RqJob.fetch(rq_job_id(dataset_id), connection=conn, serializer=JSONSerializer)
    except NoSuchJobError:
        return False
    return job.get_status(refresh=False) not in (JobStatus.FAILED, JobStatus.STOPPED)
