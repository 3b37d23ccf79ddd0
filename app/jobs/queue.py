"""The RQ queue: connection from settings, enqueue by job id (JSON payload, ids only)."""

from __future__ import annotations

import uuid
from pathlib import Path

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from app.kit.config import Settings

TASK = "worker.tasks.run_clustering_job"


def redis_url_file(settings: Settings) -> Path:
    """Where `privclust serve` records the URL of the embedded redis-server it started."""
    return settings.resolved_data_dir / "run" / "redis.url"


def resolve_redis_url(settings: Settings) -> str:
    if settings.redis_url:
        return settings.redis_url
    path = redis_url_file(settings)
    if path.exists():
        return path.read_text().strip()
    raise RuntimeError(
        "no Redis configured: set PRIVCLUST_REDIS_URL, or start `privclust serve`, which runs "
        f"an embedded redis-server and records its address in {path}"
    )


_connections: dict[str, Redis] = {}


def redis_connection(url: str) -> Redis:
    conn = _connections.get(url)
    if conn is None:
        conn = Redis.from_url(
            url, socket_connect_timeout=5, socket_timeout=10, health_check_interval=30
        )
        _connections[url] = conn
    return conn


def get_queue(settings: Settings, connection: Redis | None = None) -> Queue:
    conn = connection or redis_connection(resolve_redis_url(settings))
    return Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)


def enqueue_job(settings: Settings, job_id: uuid.UUID, queue: Queue | None = None) -> None:
    """Deterministic RQ id (= our job id); status and results live in the database, not RQ."""
    (queue or get_queue(settings)).enqueue_call(
        func=TASK,
        args=(str(job_id),),
        job_id=str(job_id),
        timeout=settings.job_timeout_seconds,
        result_ttl=3600,
        failure_ttl=7 * 24 * 3600,
    )
