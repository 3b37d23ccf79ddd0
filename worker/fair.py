"""The RQ worker of `privclust worker`: fair across tenants, jobs run by the job process.

- Pooled where the operator asks: a worker with WORKER_TENANTS reads only those tenants'
  queues, and the others skip the DEDICATED_TENANTS' (app.kit.queue.worker_queues).
- Fair: it reads the plain queue and every tenant's queue (app.kit.queue), looks for queues
  new since its last look before each dequeue (and at least every DISCOVER_SECONDS while
  idle), and takes from them in turn (RQ's round-robin order: the queue it just took from goes
  last). Behind thousands of one tenant's jobs, another tenant's job is the next but one.
- Fast: RQ's bookkeeping happens here, in the worker, without a fork per job (as RQ's
  SimpleWorker); the job itself runs in the job process (worker.runner), which keeps the crash
  isolation of a process per job without its start-up cost. While a job runs, the worker
  keeps its RQ heartbeats going as a forking worker does, so a worker that dies leaves a
  registration and a started entry that expire in about 90 s (app.jobs.reconcile relies on it).
"""

from __future__ import annotations

import time
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker, DequeueStrategy, WorkerStatus

from app.kit import queue as queues
from app.kit.config import Settings
from worker.runner import JobRunner

DISCOVER_SECONDS = 1  # an idle worker looks for new tenants' queues this often


class FairWorker(SimpleWorker):
    def __init__(
        self, settings: Settings, connection: Redis, runner: JobRunner, **kwargs: Any
    ) -> None:
        self.settings = settings
        self.runner = runner
        super().__init__(
            queues.worker_queues(settings, connection),
            connection=connection,
            serializer=JSONSerializer,
            **kwargs,
        )

    def work(self, *args: Any, **kwargs: Any) -> bool:
        kwargs.setdefault("dequeue_strategy", DequeueStrategy.ROUND_ROBIN)
        return super().work(*args, **kwargs)

    def refresh_queues(self) -> None:
        """Add the tenants' queues created since the last look, at the end of the turn order."""
        known = {q.name for q in self.queues}
        new = [
            q for q in queues.worker_queues(self.settings, self.connection) if q.name not in known
        ]
        if new:
            self.queues.extend(new)
            self._ordered_queues.extend(new)

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """RQ's dequeue, looking for new queues before each attempt and at least every
        DISCOVER_SECONDS while it waits (a blocking pop only wakes for queues it names)."""
        idle_since = time.monotonic()
        while True:
            self.refresh_queues()
            if timeout is None:  # burst: one look at every queue
                return super().dequeue_job_and_maintain_ttl(None, max_idle_time)
            result = super().dequeue_job_and_maintain_ttl(DISCOVER_SECONDS, DISCOVER_SECONDS)
            if result is not None:
                return result
            if max_idle_time is not None and time.monotonic() - idle_since >= max_idle_time:
                return None

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        # A forking worker's TTLs (SimpleWorker's last the whole job timeout): this worker
        # keeps them alive while its job process works (`execute_job`).
        return BaseWorker.get_heartbeat_ttl(self, job, working_time)

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        last = time.monotonic()

        def keepalive() -> None:
            nonlocal last
            if time.monotonic() - last >= self.job_monitoring_interval:
                last = time.monotonic()
                self.maintain_heartbeats(job, execution)

        self.runner.keepalive = keepalive
        try:
            self.perform_job(job, queue, execution)
        finally:
            self.runner.keepalive = None
            self.set_state(WorkerStatus.IDLE)
