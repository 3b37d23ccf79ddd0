"""An RQ worker's registration without a worker: what /readyz looks for, made in a test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from rq import Worker
from rq.serializers import JSONSerializer

from app.kit import queue
from app.kit.config import Settings


@contextmanager
def registered_worker(settings: Settings, pid: int | None = None) -> Iterator[Worker]:
    """A worker registered on the service's plain queue (as this process, or as `pid`) for
    the block's duration."""
    conn = queue.redis_connection(queue.resolve_redis_url(settings))
    worker = Worker(
        [queue.get_queue(settings, conn)],
        connection=conn,
        name=f"test-{uuid.uuid4().hex}",
        serializer=JSONSerializer,
    )
    if pid is not None:
        worker.pid = pid
    worker.register_birth()
    try:
        yield worker
    finally:
        worker.register_death()
