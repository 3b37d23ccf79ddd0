"""Prometheus metrics for GET /metrics: job and queue state read at scrape time, HTTP counters.

Two sources, chosen so every number is right however many processes serve the API and run jobs:

- What the database and Redis already know (jobs by status and algorithm, failed and swept
  jobs, job durations, datasets, queue depth) is read when Prometheus scrapes, by
  `StateCollector`. Jobs run in RQ worker processes, often in other containers, that share
  nothing with the API but the database; reading it at scrape time needs no instrumentation in
  the workers and cannot drift from the truth the API itself serves.
- What only a request sees (HTTP latency by route, uploads and their bytes, budget refusals) is
  counted in the API process that handled it. `privclust api` runs several uvicorn processes, so
  these use prometheus-client's multiprocess mode: `PROMETHEUS_MULTIPROC_DIR` is set (by
  `privclust api`, before prometheus_client is imported) to a directory that every API process
  writes its values into and each scrape sums. Without it (an app in a test) values live in
  memory in this process.

Nothing here is a row's content, and no metric is labelled by tenant, dataset or job. Upload
bytes still grow with the exact row counts of uploads, which analysts must not learn, so the
endpoint is for admin keys only (docs/operations.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.jobs import queue
from app.jobs.service import LOST_WORKER
from app.kit.config import Settings
from app.models import JobStatus
from app.ops import repository as repo
from privclust.clustering import Algorithm

log = logging.getLogger("privclust.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JOB_STATUSES = tuple(str(status) for status in JobStatus)
# Every method a job can run ("auto" resolves to one of them), so each has a series from start.
ALGORITHMS = tuple(str(a) for a in Algorithm if a != Algorithm.AUTO)
JOB_DURATION_BOUNDS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
UPLOAD_PATH = "/v1/datasets"


class StateCollector(Collector):
    """Job, dataset and queue metrics computed from the database and Redis at each scrape."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        database_up = GaugeMetricFamily(
            "privclust_database_up", "1 if the database answered this scrape's queries, else 0"
        )
        try:
            yield from self._from_database()
            database_up.add_metric([], 1)
        except Exception as exc:
            log.warning("metrics: cannot read the database: %s", exc)
            database_up.add_metric([], 0)
        yield database_up

        queue_up = GaugeMetricFamily("privclust_queue_up", "1 if Redis answered, else 0")
        try:
            depth = queue.get_queue(self.settings).count
            yield GaugeMetricFamily(
                "privclust_queue_depth", "Jobs waiting in the RQ queue for a worker", value=depth
            )
            queue_up.add_metric([], 1)
        except Exception as exc:
            log.warning("metrics: cannot read the queue: %s", exc)
            queue_up.add_metric([], 0)
        yield queue_up

    def _from_database(self) -> Iterator[Metric]:
        with self.sessions() as session:
            counts = repo.job_counts(session)
            swept = repo.count_failed_jobs_with_error(session, LOST_WORKER)
            durations = repo.job_run_durations(session, JOB_DURATION_BOUNDS)
            active, deleted = repo.dataset_counts(session)
            session.rollback()

        jobs = GaugeMetricFamily(
            "privclust_jobs", "Jobs in each status, by algorithm", labels=["status", "algorithm"]
        )
        by_pair = {(status, algorithm): n for status, algorithm, n in counts}
        algorithms = sorted(set(ALGORITHMS) | {a for _, a, _ in counts})
        for status in sorted(set(JOB_STATUSES) | {s for s, _, _ in counts}):
            for algorithm in algorithms:
                jobs.add_metric([status, algorithm], by_pair.get((status, algorithm), 0))
        yield jobs

        # Jobs are never deleted (a dataset's deletion keeps its jobs and ledger), so these
        # counts only grow: counters.
        failed = CounterMetricFamily(
            "privclust_jobs_failed", "Jobs that ended failed, by algorithm", labels=["algorithm"]
        )
        for algorithm in algorithms:
            failed.add_metric([algorithm], by_pair.get((JobStatus.FAILED, algorithm), 0))
        yield failed
        yield CounterMetricFamily(
            "privclust_jobs_swept",
            "Running jobs failed by the sweeper because their worker stopped sending heartbeats",
            value=swept,
        )

        histogram = HistogramMetricFamily(
            "privclust_job_duration_seconds",
            "Run time of jobs that started and finished (started_at to finished_at)",
            labels=["algorithm"],
        )
        for algorithm, n, total, within in durations:
            buckets = [
                (_bound(b), float(c)) for b, c in zip(JOB_DURATION_BOUNDS, within, strict=True)
            ]
            buckets.append(("+Inf", float(n)))
            histogram.add_metric([algorithm], buckets, total)
        yield histogram

        datasets = GaugeMetricFamily(
            "privclust_datasets", "Datasets, by whether their rows are stored", labels=["state"]
        )
        datasets.add_metric(["stored"], active)
        datasets.add_metric(["deleted"], deleted)
        yield datasets


def _bound(value: float) -> str:
    return repr(float(value))


class Metrics:
    """The metrics of one API app, and the registry that GET /metrics renders."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        multiproc_dir = os.environ.get(MULTIPROC_ENV)
        # In multiprocess mode the values go to files, and the registry reads them all back.
        own = None if multiproc_dir else CollectorRegistry()
        self.registry = own or CollectorRegistry()
        if multiproc_dir:
            MultiProcessCollector(self.registry, path=multiproc_dir)
        self.http = Histogram(
            "privclust_http_request_duration_seconds",
            "HTTP request latency by method, route template and status code",
            ["method", "route", "status"],
            registry=own,
        )
        self.uploads = Counter(
            "privclust_uploads",
            "Dataset uploads by outcome (created: 201; refused: any other answer)",
            ["outcome"],
            registry=own,
        )
        self.upload_bytes = Counter(
            "privclust_upload_bytes",
            "Request body bytes received by dataset uploads, by outcome",
            ["outcome"],
            registry=own,
        )
        self.budget_refusals = Counter(
            "privclust_budget_refusals",
            "Job submissions refused with 409 budget-exceeded",
            registry=own,
        )
        for outcome in ("created", "refused"):  # present at 0 before the first upload
            self.uploads.labels(outcome)
            self.upload_bytes.labels(outcome)
        self.registry.register(StateCollector(settings, sessions))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _route_template(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    # Unmatched paths (404s) share one label: raw paths would make a series per URL probed.
    return path if isinstance(path, str) else "unmatched"


class HttpMetrics:
    """ASGI middleware: latency of every HTTP request by route template, and upload sizes."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if the app raises before answering, the server sends a 500
        received = 0
        is_upload = scope["method"] == "POST" and scope["path"].rstrip("/") == UPLOAD_PATH

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, counting_receive if is_upload else receive, status_send)
        finally:
            self.metrics.http.labels(scope["method"], _route_template(scope), str(status)).observe(
                time.perf_counter() - started
            )
            if is_upload:
                outcome = "created" if status == 201 else "refused"
                self.metrics.uploads.labels(outcome).inc()
                self.metrics.upload_bytes.labels(outcome).inc(received)
