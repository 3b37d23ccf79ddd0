"""The FastAPI application: routers, problem+json errors, CORS, upload limit, stale-job sweeper."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from fastapi.telemetry import TelemetryConfig
from fastapi_offline import FastAPIOffline
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, console
from app.datasets import endpoints as datasets
from app.datasets import service as datasets_service
from app.federation import endpoints as federation
from app.federation.expiry import expire_idle_member_jobs
from app.jobs import endpoints as jobs
from app.jobs.sweeper import Sweeper
from app.keys import endpoints as keys
from app.keys import service as keys_service
from app.keys.auth import check_claim_before_validation, require
from app.kit import problems
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.kit.config import Settings, get_settings
from app.kit.db.session import read_session_factory, session_factory
from app.kit.deps import configure_threads
from app.kit.errors import BudgetExceeded, PrivclustError
from app.ledger import endpoints as ledger_endpoints
from app.ledger import key_endpoints
from app.models import ApiKey
from app.ops import endpoints as metrics
from app.ops import health
from app.ops import problems as problem_pages
from app.ops.metrics import HttpMetrics, Metrics
from app.sweeps import endpoints as sweeps
from privclust.clustering.auto import describe_auto

log = logging.getLogger("privclust.api")

DESCRIPTION = (
    """
Differentially private k-means clustering as a service: PE-means, HDPE-means, FastLloyd, an
LSH-tree coreset and pe-lloyd (PE-means, then noisy Lloyd steps); """
    + describe_auto()
    + """.

Data owners upload a dataset with a **declared public domain** and a total privacy budget
(epsilon, delta). Analysts submit clustering jobs; every job is a Gaussian mechanism whose
cost (mu-GDP) is charged atomically against the dataset's budget before any noise is drawn.

Neighbouring datasets differ by adding or removing one row, so the exact row count N is
private: each upload releases a noisy count `n_rows_dp` once, charged to the budget (the
ledger's `count` entry; by default 0.1 x mu_cap), and jobs plan with it. Analysts see only
differentially private centres and public metadata: `n_rows_dp`, the number of columns d, the
column names and the declared domain. The exact `n_rows` is in the owner's view only. An owner
may declare the count public at upload (`count_public=true`): then nothing is released, N is
used exactly, and jobs are calibrated to replace-one neighbours (`relation`).

Authenticate with `Authorization: Bearer <api key>`. Errors are RFC 9457
`application/problem+json` documents with a stable `code`.
"""
)


def _operation_id(route: APIRoute) -> str:
    # Route functions are named `<resource>_<verb>`, which reads well in generated clients.
    return route.name


class _BodyTooLarge(Exception):
    """Raised from the upload's receive channel once the body passes the limit."""


def _upload_key(factory: Any, secret: str | None) -> ApiKey:
    with factory() as session:
        key = keys_service.authenticate(session, secret)
    require(key, "owner")
    return key


class _UploadGate:
    """Guards `POST /v1/datasets` before and while its body streams in.

    - Who: the API key is checked (and must be an owner's) before a byte of the body is read,
      so a caller without one cannot make the server spool anything.
    - How much: a Content-Length over the limit is refused at once; a body without one
      (chunked) is counted as it arrives, and the read stops as soon as it passes the limit
      (plus 1 MiB for the multipart framing), so the spool never grows past that.
    A plain ASGI middleware: `@app.middleware("http")` would put every request, polls
    included, through an extra task and a pair of memory streams.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.cap = limit + 1024 * 1024

    def _too_large(self, size: str) -> JSONResponse:
        return problems.problem_response(
            413, "too-large", "Upload too large", f"the upload is {size}; the limit is {self.limit}"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/") == "/v1/datasets"
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        secret = credentials.strip() if scheme.lower() == "bearer" else None
        try:
            await anyio.to_thread.run_sync(_upload_key, scope["app"].state.sessionmaker, secret)
        except PrivclustError as exc:
            response = problems.problem_response(exc.status, exc.code, exc.title, exc.detail)
            await response(scope, receive, send)
            return
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.cap:
            await self._too_large(f"{int(length)} bytes")(scope, receive, send)
            return

        received = 0
        exceeded = False
        started = False

        async def counted() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.cap:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # the app's own answer to a cut-off body; ours is sent below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await self._too_large(f"over {self.cap} bytes")(scope, receive, send)


def _opentelemetry() -> TelemetryConfig:
    """FastAPI's OpenTelemetry spans, metrics and logs, on when the environment configures
    OpenTelemetry (any OTEL_* variable, as `opentelemetry-instrument` and the SDK's own
    configuration use). Unconfigured, FastAPI still looked for providers on every request:
    about 5% of the API's CPU under polling, for nothing.
    """
    on = any(name.startswith("OTEL_") for name in os.environ)
    return {"tracing": on, "metrics": on, "logs": on}


_ROUTERS = (
    health.router,
    metrics.router,
    problem_pages.router,
    keys.router,
    keys.me_router,
    datasets.router,
    ledger_endpoints.router,
    key_endpoints.router,
    jobs.router,
    sweeps.router,
    federation.router,
    federation.owner_router,
)


def create_app(settings: Settings | None = None, clock: Clock | None = None) -> FastAPI:
    """The API; `clock` tells the time for paces (app.kit.clock): the wall clock by default."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Endpoints run on these threads; each holds at most one pooled connection at a time,
        # and the pool has a connection for every thread (app.kit.db.session.get_engine).
        configure_threads(settings)
        datasets_service.remove_abandoned_uploads(settings, app.state.sessionmaker)
        chores = [partial(expire_idle_member_jobs, settings, app.state.sessionmaker)]
        with Sweeper.running(settings, app.state.sessionmaker, chores):
            yield

    # /docs and /redoc load Swagger UI, ReDoc and the favicon from files shipped in the
    # fastapi-offline wheel (served under /static-offline-docs), never from a CDN: the service
    # often runs on a host without internet access. No online spec validator either.
    app = FastAPIOffline(
        title="privclust",
        swagger_ui_parameters={"validatorUrl": None},
        version=__version__,
        description=DESCRIPTION,
        generate_unique_id_function=_operation_id,
        lifespan=lifespan,
        telemetry=_opentelemetry(),
    )
    app.state.settings = settings
    app.state.clock = clock or SYSTEM_CLOCK
    pool_size = settings.api_pool_size
    app.state.sessionmaker = session_factory(settings.resolved_database_url, pool_size=pool_size)
    app.state.read_sessionmaker = read_session_factory(
        settings.resolved_database_url, pool_size=pool_size
    )
    app.state.metrics = Metrics(settings, app.state.sessionmaker)
    problems.install(app, check_claim_before_validation)
    app.add_exception_handler(BudgetExceeded, metrics.budget_refused)

    app.add_middleware(_UploadGate, limit=settings.max_upload_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            expose_headers=["Idempotent-Replayed", "X-Next-Cursor"],
            max_age=600,
        )
    # Outermost, so its latency includes the upload gate and CORS.
    app.add_middleware(HttpMetrics, metrics=app.state.metrics)
    for router in _ROUTERS:
        app.include_router(router)
    app.mount("/console", console.static_app(), name="console")
    _polish_openapi(app)
    return app


def _polish_openapi(app: FastAPI) -> None:
    """The Problem schema is registered once; routes reference it under
    `application/problem+json` (see app.kit.problems.responses)."""

    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas["Problem"] = problems.Problem.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
