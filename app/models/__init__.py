"""SQLAlchemy models: API keys, datasets, jobs, sweeps over k, the append-only privacy ledger
and the running budget it folds into; a federation's tables are in app.models.federation and
imported here, so that every table is registered on `Base.metadata` by importing app.models."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.db.base import Base, utcnow


class Role(StrEnum):
    """What an API key may do (docs/api.md, "Auth and isolation")."""

    ADMIN = "admin"
    OWNER = "owner"
    ANALYST = "analyst"
    # A party of a federation: scoped to one dataset (ApiKey.dataset_id), it may only take
    # part in that dataset's federated jobs (app.federation).
    MEMBER = "member"


class JobStatus(StrEnum):
    """A job's states; the jobs service alone moves a job between them (compare-and-set)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A job in one of these states has finished: nothing moves it again.
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class LedgerKind(StrEnum):
    """The kinds of ledger entries (LedgerEntry.kind)."""

    CAP = "cap"
    COUNT = "count"
    RESERVE = "reserve"
    COMMIT = "commit"
    REFUND = "refund"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DomainKind(StrEnum):
    """How a dataset's public domain was declared: a ball (`center`, `radius`) or per-column
    bounds (`lower`, `upper`), which jobs cluster in the scaled space (privclust.clustering.
    scaling)."""

    BALL = "ball"
    BOX = "box"


class DatasetStatus(StrEnum):
    """Whether a dataset's rows can be used: an upload is `ready` when it is created; an import
    by reference is `importing` until a worker has copied its rows and released its count."""

    IMPORTING = "importing"
    READY = "ready"
    FAILED = "failed"


class DatasetKind(StrEnum):
    STORED = "stored"
    FEDERATED = "federated"


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant: Mapped[str] = mapped_column(String(100), index=True)
    role: Mapped[str] = mapped_column(String(20))
    # sha256 of the secret; the secret itself is shown once and never stored.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    # The one dataset a `member` key serves (null for every other role).
    dataset_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("datasets.id"), default=None)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    tenant: Mapped[str] = mapped_column(String(100), index=True)
    name: Mapped[str] = mapped_column(String(200))
    # The exact row count: shown to the owner only. Under add/remove DP it is private. Null
    # until an import has stored its rows (and charged its count).
    n_rows: Mapped[int | None] = mapped_column(Integer)
    # The row count everyone sees and every job plans with: N + integer Gaussian noise released
    # once at upload (floored at 0), or exactly n_rows when the owner declared the count public.
    # Null until an import has released it.
    n_rows_dp: Mapped[int | None] = mapped_column(Integer)
    # The owner declared N public: no count release, and jobs use replace-one sensitivities.
    count_public: Mapped[bool] = mapped_column(Boolean, default=False)
    # The GDP cost of the noisy count (null when the count is public).
    count_mu: Mapped[float | None] = mapped_column(Float, default=None)
    # While an import has not read its source's columns: n_cols 0, columns as declared (or
    # empty), and a ball's centre as declared (or empty); the API shows them as unknown.
    n_cols: Mapped[int] = mapped_column(Integer)
    columns: Mapped[list[Any]] = mapped_column(JSON)
    # The ball every row is in (for a box: the ball around it).
    center: Mapped[list[Any]] = mapped_column(JSON)
    radius: Mapped[float] = mapped_column(Float)
    # A box's declared per-column bounds (null for a ball). Datasets uploaded before boxes were
    # stored are balls: their bounds were never kept (README, "Upgrading").
    domain_kind: Mapped[str] = mapped_column(
        String(8), default=DomainKind.BALL, server_default=DomainKind.BALL.value
    )
    lower: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    upper: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # The cap as the owner gave it, and mu_cap derived from it (safely rounded down).
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    mu_cap: Mapped[float] = mapped_column(Float)
    # Where the rows are (app.datasets.storage): a local .npy path or an s3:// prefix.
    storage_path: Mapped[str | None] = mapped_column(String(1000))
    created_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    # An import by reference (app.datasets.imports): its state, the source it reads (null for
    # an upload), the fraction of the source read, its worker's last sign of life, and why it
    # failed (never anything read from the rows).
    status: Mapped[str] = mapped_column(
        String(16), default=DatasetStatus.READY, server_default=DatasetStatus.READY.value
    )
    source: Mapped[str | None] = mapped_column(String(2000), default=None)
    progress: Mapped[float | None] = mapped_column(Float, default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    failure_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # The table terms (privclust.tabular.TableSpec.public(): the privacy unit and its m, the
    # missing-value policy and fills, the categories and their weight), public; null: a plain
    # table whose unit is one row. `ingest_counts`: what the policy and the unit bound did to
    # the rows (owner-only, like n_rows).
    table_spec: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    ingest_counts: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # "federated": no row stored; every release is the secure sum of the members' (c, members).
    kind: Mapped[str] = mapped_column(
        String(16), default=DatasetKind.STORED, server_default=DatasetKind.STORED.value
    )
    federation: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)


class Sweep(Base):
    """One admission of several jobs, one per k, sharing a total mu (each mu / sqrt(m)).

    Its state and progress are those of its jobs (`Job.sweep_id`); it stores what was asked.
    """

    __tablename__ = "sweeps"
    __table_args__ = (
        UniqueConstraint("tenant", "idempotency_key", name="uq_sweeps_tenant_idempotency_key"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    tenant: Mapped[str] = mapped_column(String(100), index=True)
    ks: Mapped[list[Any]] = mapped_column(JSON)
    algorithm: Mapped[str] = mapped_column(String(20))
    # The sweep's total cost; each job is charged job_mu = mu / sqrt(len(ks)) (rounded down).
    mu: Mapped[float] = mapped_column(Float)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    job_mu: Mapped[float] = mapped_column(Float)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    request_fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)
    created_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        Index("ix_jobs_status_heartbeat", "status", "heartbeat_at"),
        # A page of a job list reads only its rows, in the list's order (created_at, id),
        # by tenant, dataset or tenant and status; the operator's caps count a tenant's (a
        # key's) queued jobs from the same index (and the next).
        Index("ix_jobs_tenant_created", "tenant", "created_at", "id"),
        Index("ix_jobs_dataset_created", "dataset_id", "created_at", "id"),
        Index("ix_jobs_tenant_status_created", "tenant", "status", "created_at", "id"),
        Index("ix_jobs_created_by_status", "created_by", "status"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    tenant: Mapped[str] = mapped_column(String(100), index=True)
    algorithm: Mapped[str] = mapped_column(String(20))
    k: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    mu: Mapped[float] = mapped_column(Float)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    sigma: Mapped[float] = mapped_column(Float)
    releases: Mapped[int] = mapped_column(Integer)
    iterations: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.QUEUED)
    progress_iteration: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    centers: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    request_fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)
    created_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    # Private summaries (privclust.clustering.outputs.summaries): asked for, their part of `mu`,
    # and the released noisy sizes, loss and the loss's standard error once the job succeeded.
    summaries: Mapped[bool] = mapped_column(Boolean, default=False)
    summary_mu: Mapped[float | None] = mapped_column(Float, default=None)
    sizes: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    loss: Mapped[float | None] = mapped_column(Float, default=None)
    loss_se: Mapped[float | None] = mapped_column(Float, default=None)
    # How far the run's last noisy Lloyd step moved its centres against that step's noise, and
    # that centre's move in the clustering space (post-processing of released values; null
    # for a method without Lloyd steps).
    last_move: Mapped[float | None] = mapped_column(Float, default=None)
    last_shift: Mapped[float | None] = mapped_column(Float, default=None)
    sweep_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("sweeps.id"), default=None, index=True
    )
    # A federated dataset's job: each member's part, public facts only (position, status, the
    # releases it answered: app.coordinator.service.FederatedJob.states); null otherwise.
    member_states: Mapped[list[Any] | None] = mapped_column(JSON, default=None)


class LedgerEntry(Base):
    """One immutable fact about a dataset's privacy budget; the budget is the replay of these.

    kinds: `cap` (cap set or raised), `count` (the noisy row count released at upload: spent,
    never refunded), `reserve` (job admitted), `commit` (first noise about to be
    drawn: no refund from here), `refund` (job ended before any noise), `cancel` and `fail`
    (state changes after commit, for the audit trail; they do not change the budget).
    """

    __tablename__ = "ledger_entries"
    # A dataset's entries in order: a page of its ledger, or its replay.
    __table_args__ = (Index("ix_ledger_entries_dataset_id_id", "dataset_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[uuid.UUID | None] = mapped_column(default=None, index=True)
    # The sweep that admitted the job (no foreign key: the ledger outlives everything).
    sweep_id: Mapped[uuid.UUID | None] = mapped_column(default=None, index=True)
    actor_key_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    mu: Mapped[float | None] = mapped_column(Float, default=None)
    sigma: Mapped[float | None] = mapped_column(Float, default=None)
    releases: Mapped[int | None] = mapped_column(Integer, default=None)
    epsilon: Mapped[float | None] = mapped_column(Float, default=None)
    delta: Mapped[float | None] = mapped_column(Float, default=None)
    note: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The hash chain (app.ledger.chain): the dataset's previous entry's hash, and this entry's
    # own over that hash, its content and the running budget it leaves.
    prev_hash: Mapped[str] = mapped_column(String(64))
    entry_hash: Mapped[str] = mapped_column(String(64))


class DatasetBudget(Base):
    """A dataset's running budget: the fold of its ledger, kept in step with it.

    app.ledger.service updates this row in the same transaction as each ledger entry that
    changes the budget (cap, count, reserve, commit, refund), so every read takes it in one
    query however long the ledger is; `privclust ledger verify` replays the ledger and compares.
    The sums of squares are exact rationals, written "numerator/denominator": a float's square
    is dyadic, so the sums and the differences stay exact, with no drift.
    """

    __tablename__ = "dataset_budgets"

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    mu_cap: Mapped[float] = mapped_column(Float)
    # sum of mu^2 over the dataset's own releases (the noisy row count) and committed jobs.
    spent_sq: Mapped[str] = mapped_column(Text)
    # sum of mu^2 over admitted jobs that have not drawn noise yet.
    reserved_sq: Mapped[str] = mapped_column(Text)
    # jobs ever admitted (each `reserve` entry), refunded ones included.
    jobs: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The hash of the dataset's last ledger entry: where the next entry's chain continues.
    last_hash: Mapped[str] = mapped_column(String(64))
    # The owner's pace (app.ledger.pace): at most pace_mu per UTC period, and the exact sum of
    # squares admitted in the period that began at pace_start. None: no pace.
    pace_period: Mapped[str | None] = mapped_column(String(8), default=None)
    pace_mu: Mapped[float | None] = mapped_column(Float, default=None)
    pace_start: Mapped[datetime | None] = mapped_column(default=None)
    pace_used_sq: Mapped[str] = mapped_column(Text, default="0/1")


class KeyBudget(Base):
    """The owner's cap on what one API key may spend of one dataset, and its running spend.

    The spend is that of the jobs the key admitted on the dataset (their `reserve` entries name
    the key), folded like the dataset's running budget and moved in the same transactions;
    `privclust ledger verify` replays the key's entries and compares. A key without a row shares
    what the dataset has left.
    """

    __tablename__ = "key_budgets"

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), primary_key=True)
    # The cap as the owner gave it: (epsilon, delta), or mu alone (epsilon None).
    epsilon: Mapped[float | None] = mapped_column(Float, default=None)
    delta: Mapped[float | None] = mapped_column(Float, default=None)
    mu_cap: Mapped[float] = mapped_column(Float)
    spent_sq: Mapped[str] = mapped_column(Text)
    reserved_sq: Mapped[str] = mapped_column(Text)
    jobs: Mapped[int] = mapped_column(Integer)
    pace_period: Mapped[str | None] = mapped_column(String(8), default=None)
    pace_mu: Mapped[float | None] = mapped_column(Float, default=None)
    pace_start: Mapped[datetime | None] = mapped_column(default=None)
    pace_used_sq: Mapped[str] = mapped_column(Text, default="0/1")
    updated_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


@event.listens_for(LedgerEntry, "before_update")
@event.listens_for(LedgerEntry, "before_delete")
def _ledger_is_append_only(mapper: Any, connection: Any, target: LedgerEntry) -> None:
    raise RuntimeError("ledger entries are append-only")


# The federation's tables (a member's seats, jobs and answers; a coordinator's member keys),
# imported so that app.models registers every table and names every model.
from app.models.federation import (  # noqa: E402, F401
    FederationMemberKey,
    MemberAnswer,
    MemberJob,
    MemberSeat,
)
