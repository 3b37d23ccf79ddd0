"""Prometheus metrics for GET /metrics: what the database and Redis know, read at scrape time
(app.ops.state), and what only a request sees, counted in the API process that served it.

- Job, queue, worker, dataset and budget figures come from `StateCollector` at each scrape.
- HTTP latency by route, uploads and their bytes, and budget refusals are counted here.
  `privclust api` runs several uvicorn processes, so these use prometheus-client's
  multiprocess mode: `PROMETHEUS_MULTIPROC_DIR` is set (by `privclust api`, before
  prometheus_client is imported) to a directory that every API process writes its values into
  and each scrape sums. Without it (an app in a test) values live in memory in this process.
- `privclust_build_info` says which version answers; `process_*` describe the process that
  answers (prometheus_client's process collector).

Nothing here is a row's content. Budget figures are labelled by tenant (a capped key's also by
its key id); nothing is labelled by dataset or job. Upload bytes grow with the exact row counts
of uploads, which analysts must not learn, so the endpoint is for admin keys only
(docs/operations.md).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__
from app.kit.config import Settings
from app.ops.state import StateCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UPLOAD_PATH = "/v1/datasets"
# Requests outside every route and mount (404s) share one label: raw paths would make a series
# per URL probed.
UNMATCHED = "unmatched"


class BuildInfo(Collector):
    """`privclust_build_info{version, python} 1`: which release answers the scrape."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "privclust_build_info",
            "Always 1; the labels say which privclust version and Python serve the API",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


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
        self.registry.register(BuildInfo())
        # process_* (CPU seconds, resident memory, open files, start time) of the API process
        # that answers the scrape; in multiprocess mode, of that one process only.
        ProcessCollector(registry=self.registry)
        self.registry.register(StateCollector(settings, sessions))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _template_of(routes: Sequence[BaseRoute], scope: Scope) -> str | None:
    """The template of the route or mount that serves `scope`'s path: a route's own path
    (`/openapi.json`), a mount's path with `/{path}` (`/console/{path}`)."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(route, Mount):
            return route.path + "/{path}"
        path = getattr(route, "path", None)
        if isinstance(path, str):
            return path
    return None


def route_template(scope: Scope, request_scope: Scope) -> str:
    """The label of a served request. FastAPI records its own routes in the scope; anything
    else (the console's and the API docs' files, /openapi.json) is matched against the app's
    routes here, including the path the router redirects to (`/console` -> `/console/`)."""
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and not isinstance(route, Mount):
        return path
    routes = getattr(scope.get("app"), "routes", None) or []
    probe = {**request_scope, "path_params": {}}
    found = _template_of(routes, probe)
    if found is None and not probe["path"].endswith("/"):
        found = _template_of(routes, {**probe, "path": probe["path"] + "/"})
    return found or UNMATCHED


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
        # What the request looked like before routing rewrote the scope (a mount's root_path).
        request_scope = {k: scope[k] for k in ("type", "method", "path", "root_path") if k in scope}

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
            route = route_template(scope, request_scope)
            self.metrics.http.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - started
            )
            if is_upload:
                outcome = "created" if status == 201 else "refused"
                self.metrics.uploads.labels(outcome).inc()
                self.metrics.upload_bytes.labels(outcome).inc(received)
