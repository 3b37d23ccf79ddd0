"""The RQ queues: connection from settings, enqueue by job id (JSON payload, ids only).

One queue per tenant, so that one tenant's burst cannot starve another: a job goes to its
tenant's queue (`<queue_name>.<digest of the tenant>`), whose name is first added to a Redis set
that workers read before each dequeue; a worker takes from the queues in turn (round robin), so
behind any number of one tenant's jobs another tenant's job waits for at most one job per busy
tenant. The plain `<queue_name>` queue is still read (jobs queued before tenants had queues,
and anything enqueued without a tenant).
"""

from __future__ import annotations

import hashlib
import socket
import uuid
from pathlib import Path

from redis import Redis
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from app.kit.config import Settings
from app.kit.processes import pid_alive

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


def _connection(settings: Settings, connection: Redis | None) -> Redis:
    return connection or redis_connection(resolve_redis_url(settings))


def get_queue(settings: Settings, connection: Redis | None = None) -> Queue:
    """The plain queue: workers register on it (it names them to `privclust worker --check`
    and to the metrics) and still read it."""
    return Queue(
        settings.queue_name, connection=_connection(settings, connection), serializer=JSONSerializer
    )


def tenant_queue_name(settings: Settings, tenant: str) -> str:
    """The tenant's queue: a digest, so that no tenant name appears in Redis keys."""
    return f"{settings.queue_name}.{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"


def _known_queues_key(settings: Settings) -> str:
    return f"privclust:queues:{settings.queue_name}"


def tenant_queue(settings: Settings, tenant: str, connection: Redis | None = None) -> Queue:
    return Queue(
        tenant_queue_name(settings, tenant),
        connection=_connection(settings, connection),
        serializer=JSONSerializer,
    )


def all_queues(settings: Settings, connection: Redis | None = None) -> list[Queue]:
    """The plain queue, then every tenant queue a job was ever enqueued on (in name order)."""
    conn = _connection(settings, connection)
    names = sorted(
        n.decode() if isinstance(n, bytes) else str(n)
        for n in conn.smembers(_known_queues_key(settings))
    )
    return [get_queue(settings, conn)] + [
        Queue(name, connection=conn, serializer=JSONSerializer) for name in names
    ]


def worker_queues(settings: Settings, connection: Redis | None = None) -> list[Queue]:
    """The queues a worker takes jobs from: its own tenants' (WORKER_TENANTS: a pool of their
    own, which reads nothing else), or else the plain queue and every tenant's but those with
    a pool of their own (DEDICATED_TENANTS)."""
    conn = _connection(settings, connection)
    if settings.worker_tenants:
        return [tenant_queue(settings, tenant, conn) for tenant in settings.worker_tenants]
    dedicated = {tenant_queue_name(settings, tenant) for tenant in settings.dedicated_tenants}
    return [q for q in all_queues(settings, conn) if q.name not in dedicated]


def live_workers(settings: Settings, connection: Redis | None = None) -> int:
    """RQ workers registered on this service's queues (the plain one or a tenant's), that is
    workers able to take a job: `privclust worker` registers only once its job process is
    ready. A registration outlives a killed worker until RQ lets it expire; one of this host
    whose process is gone is not counted."""
    conn = _connection(settings, connection)
    host = socket.gethostname()
    prefix = settings.queue_name + "."
    live = 0
    for w in Worker.all(connection=conn):
        ours = any(n == settings.queue_name or n.startswith(prefix) for n in w.queue_names())
        gone = w.hostname == host and w.pid is not None and not pid_alive(w.pid)
        live += int(ours and not gone)
    return live


def queued_count(settings: Settings, connection: Redis | None = None) -> int:
    """Jobs waiting in all the queues (one round trip for their lengths)."""
    queues = all_queues(settings, connection)
    with queues[0].connection.pipeline(transaction=False) as pipe:
        for q in queues:
            pipe.llen(q.key)
        return sum(int(n) for n in pipe.execute())


def enqueue_job(
    settings: Settings, job_id: uuid.UUID, tenant: str | None = None, queue: Queue | None = None
) -> None:
    """Deterministic RQ id (= our job id); status and results live in the database, not RQ.

    The job goes to `queue` if given, else to its tenant's queue (made known to the workers
    first), else to the plain one. RQ keeps no result (result_ttl=0): the task's return value
    is only the status the database already has."""
    if queue is None and tenant is not None:
        queue = tenant_queue(settings, tenant)
        queue.connection.sadd(_known_queues_key(settings), queue.name)
    enqueue_task(settings, queue or get_queue(settings), TASK, str(job_id), str(job_id))


def enqueue_task(settings: Settings, queue: Queue, task: str, argument: str, rq_id: str) -> None:
    """One task on `queue` under the deterministic RQ id `rq_id`, passed one id (never rows),
    with the job time limit; RQ keeps no result (the database has the status) and keeps a
    failure for a week."""
    queue.enqueue_call(
        func=task,
        args=(argument,),
        job_id=rq_id,
        timeout=settings.job_timeout_seconds,
        result_ttl=0,
        failure_ttl=7 * 24 * 3600,
    )
