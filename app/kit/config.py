"""Runtime settings: one pydantic-settings class, env prefix PRIVCLUST_, validated at start."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the service. Unset database/Redis URLs select the embedded defaults."""

    model_config = SettingsConfigDict(env_prefix="PRIVCLUST_", extra="ignore")

    data_dir: Path = Field(
        default=Path("var"),
        description="Where uploaded datasets, the SQLite database and the embedded Redis live.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db. "
        "Unset: SQLite at DATA_DIR/privclust.db.",
    )
    redis_url: str | None = Field(
        default=None,
        description="Redis URL for the job queue. Unset: `privclust serve` starts an embedded "
        "redis-server on a unix socket inside DATA_DIR.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="An admin API key accepted on every start. Unset: one is generated on first "
        "start and printed once.",
    )
    admin_token_file: Path | None = Field(
        default=None,
        description="A file holding the admin API key, used instead of ADMIN_TOKEN (a secret "
        "under /run/secrets, as docker-compose.yml mounts one); an empty file counts as unset.",
    )
    host: str = Field(default="127.0.0.1", description="Address the API listens on.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the API listens on.")
    # 4 GiB: a 10,000,000 x 16 CSV of full-precision numbers is about 2.6 GB; the upload
    # streams (the API stayed at 134 MiB resident in bench/RESULTS.md) into a float64 .npy of
    # N x d x 8 bytes, 1.28 GB for that one.
    max_upload_bytes: int = Field(
        default=4 * 1024**3, gt=0, description="Largest accepted dataset upload, in bytes."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated browser origins allowed to call the API (none by default).",
    )
    worker_tenants: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated tenants whose jobs this worker runs, and no other's: a "
        "worker pool of their own, so that other tenants' jobs neither delay theirs nor learn "
        "their length from the wait (docs/privacy.md). Unset: every tenant not in "
        "DEDICATED_TENANTS.",
    )
    dedicated_tenants: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated tenants that have a worker pool of their own (workers "
        "with WORKER_TENANTS): the shared workers never take their jobs.",
    )
    queue_name: str = Field(
        default="privclust",
        description="RQ queue name; each tenant's jobs wait in a queue named after it.",
    )
    max_queued_jobs_per_tenant: int | None = Field(
        default=None,
        ge=1,
        description="At most this many of a tenant's jobs may wait to run at once; more are "
        "refused with 429 too-many-queued-jobs (nothing charged). Unset: no cap.",
    )
    max_queued_jobs_per_key: int | None = Field(
        default=None,
        ge=1,
        description="The same cap per API key. Unset: no cap.",
    )
    worker_max_rss_mb: int = Field(
        default=2048,
        ge=64,
        description="A worker's job process is replaced by a fresh one after a job that left it "
        "using more memory than this (MiB).",
    )
    job_timeout_seconds: int = Field(
        default=3600, gt=0, description="A clustering job running longer than this is failed."
    )
    heartbeat_seconds: float = Field(
        default=5.0, gt=0, description="How often a running job records that its worker lives."
    )
    stale_job_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A running job whose heartbeat is older than this is marked failed; a "
        "queued job older than this that is missing from the queue is enqueued again.",
    )
    ledger_check_seconds: float = Field(
        default=300.0,
        ge=0,
        description="Seconds between two batches of the API sweeper's ledger check (replay, "
        "hash chain, commits against their jobs); 0: the sweeper never checks (run `privclust "
        "ledger verify` instead).",
    )
    api_workers: int = Field(
        default_factory=lambda: min(2, os.cpu_count() or 1),
        ge=1,
        le=64,
        description="API processes (uvicorn workers) sharing the port (default: 2, or 1 on a "
        "single-core machine). Requests are CPU-bound in Python, so one process uses one core.",
    )
    access_log: bool = Field(default=True, description="Log one line per HTTP request.")
    api_threads: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="Threads that run request handlers in each API process; its database pool "
        "holds as many connections, plus UPLOAD_THREADS, plus 4 for the sweeper and spikes "
        "(unless DB_POOL_SIZE says otherwise).",
    )
    upload_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Uploads ingested at once per API process; more wait their turn.",
    )
    worker_threads: int | None = Field(
        default=None,
        ge=1,
        description="BLAS/OpenMP threads per worker (default: all cores).",
    )
    db_pool_size: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Database connections each API process keeps in its pool (it may open 4 "
        "more at a spike). Unset: API_THREADS + UPLOAD_THREADS, one for every thread that can "
        "hold one.",
    )
    storage_url: str | None = Field(
        default=None,
        description="Where datasets' rows are stored: unset or a local path, a folder of "
        "memory-mapped .npy files (default: DATA_DIR/datasets); `s3://bucket/prefix`, Parquet "
        "files in object storage (endpoint and credentials from the AWS_* variables).",
    )
    federation_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=55,
        description="A coordinator's bound on each call to a federation's member (connect, "
        "send, answer); a member that does not answer in time fails the job.",
    )
    federation_reservation_seconds: float = Field(
        default=86400.0,
        gt=0,
        description="A member ends a federated job that received no release for this long "
        "(since it joined, or since its last release): refunded when it answered none, else "
        "failed with its charge kept. A coordinator's job that waits longer in its queue fails "
        "at its first release.",
    )
    federation_ca_file: str | None = Field(
        default=None,
        description="A CA bundle (PEM) that members' HTTPS certificates must chain to, in place "
        "of the system's: pin the members' own CA (docs/self-hosting.md).",
    )
    partition_rows: int = Field(
        default=1 << 20,
        ge=1,
        description="Most rows in one stored partition (a Parquet row group in object "
        "storage; a block of rows that a worker reads at once, or a piece of it that fits a "
        "Dask worker's memory limit).",
    )
    import_sources: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated prefixes (`s3://bucket/folder`, `/mnt/lake`) under which "
        "`POST /v1/datasets` may import Parquet by reference. Empty: imports are off.",
    )

    dask_scheduler: str | None = Field(
        default=None,
        description="A Dask scheduler's address (`tcp://host:8786`, `tls://host:8786`): every "
        "pass of a job over the rows runs on that cluster. Unset: in the worker's process.",
    )
    dask_connect_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long a job waits for the Dask scheduler before it fails (refunded: "
        "no noise was drawn).",
    )
    dask_cache_mb: int = Field(
        default=512,
        ge=0,
        description="Prepared partitions each Dask worker process keeps for a running job's "
        "later passes, in MiB (0: read every partition from storage at every pass). At most "
        "what fits in 60% of the smallest worker's memory limit beside its tasks.",
    )
    dask_stall_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A running job fails when the Dask cluster could not run its tasks (no "
        "worker, every worker paused for memory, no scheduler) for this long.",
    )

    @field_validator("storage_url")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in ("", "s3", "file"):
            raise ValueError("must be a local path or an s3://bucket/prefix URL")
        if scheme == "s3" and not value[len("s3://") :].strip("/"):
            raise ValueError("an s3:// URL needs a bucket: s3://bucket/prefix")
        return value.rstrip("/") if scheme else value

    @field_validator(
        "import_sources", "cors_origins", "worker_tenants", "dedicated_tenants", mode="before"
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        """A list given as one comma-separated string (an environment variable)."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("admin_token_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        # Checked here, where an error shows only the path (a model-level one would show every
        # setting, the admin token included).
        if value is not None:
            try:
                value.read_text()
            except OSError as exc:
                raise ValueError(f"cannot read it: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _read_admin_token_file(self) -> Settings:
        if self.admin_token_file is not None:
            token = self.admin_token_file.read_text().strip()
            self.admin_token = SecretStr(token) if token else None
        return self

    @property
    def resolved_data_dir(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.resolved_data_dir / 'privclust.db'}"

    @property
    def datasets_dir(self) -> Path:
        """Local datasets' folder, and the scratch space of uploads whatever the storage."""
        return self.resolved_data_dir / "datasets"

    @property
    def resolved_storage_url(self) -> str:
        """Where datasets' rows live: an `s3://` URL, or an absolute local path."""
        url = self.storage_url
        if url is None:
            return str(self.datasets_dir)
        if url.startswith("s3://"):
            return url
        local = url[len("file://") :] if url.startswith("file://") else url
        return str(Path(local).expanduser().resolve())

    @property
    def api_pool_size(self) -> int:
        """Connections in each API process's database pool."""
        if self.db_pool_size is not None:
            return self.db_pool_size
        return self.api_threads + self.upload_threads


# docker-compose.yml's Postgres password when POSTGRES_PASSWORD is not set.
COMPOSE_DEFAULT_DB_PASSWORD = "privclust"


def default_password_warning(settings: Settings) -> str | None:
    """A warning to print at start when the database still has docker-compose.yml's password."""
    url = settings.database_url
    if not url or urlsplit(url).password != COMPOSE_DEFAULT_DB_PASSWORD:
        return None
    return (
        "WARNING: the database password is the default one from docker-compose.yml; set "
        "POSTGRES_PASSWORD in .env before the Postgres volume is first created (see .env.example)"
    )


@lru_cache
def get_settings() -> Settings:
    return Settings()
