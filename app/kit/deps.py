"""Request dependencies: settings, one DB session per request, and the unit-of-work route.

A pooled database connection is only ever held by a thread that is running: a request's
session connects inside the thread that runs its endpoint and is committed and closed in that
same thread (`UnitOfWorkRoute`), which is also where the API key is checked (a `Deferred`:
app.keys.auth).
Holding a connection while waiting for a free thread (to serialize a response, or to run the
endpoint after authentication) deadlocked the server under concurrent polling: every thread
waited for a connection held by a request that waited for a thread.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import Depends, Query, Request, params
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session, sessionmaker

from app.kit.clock import SYSTEM_CLOCK, Clock
from app.kit.config import Settings
from app.kit.db.session import finish
from app.kit.repository import CURSOR_PATTERN

# The query parameters of every paginated list (newest first; `next_cursor` of the last page).
PageLimit = Annotated[int, Query(ge=1, le=200)]
PageCursor = Annotated[
    str | None,
    Query(
        pattern=CURSOR_PATTERN,
        description="The `next_cursor` of the previous page: a position in the list.",
    ),
]


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


class _Limiters:
    """Thread pools besides anyio's default one, per event loop (as anyio's own is).

    `uploads`: endpoints that ingest an uploaded file take seconds of CPU each; they queue
    here, holding nothing, instead of filling the threads that answer every other request.
    `cleanup`: sessions an endpoint left open are finished here, so that finishing one never
    waits behind requests that wait for a connection.
    """

    def __init__(self, upload_threads: int) -> None:
        self.uploads = anyio.CapacityLimiter(upload_threads)
        self.cleanup = anyio.CapacityLimiter(4)


_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Limiters] = (
    weakref.WeakKeyDictionary()
)


def configure_threads(settings: Settings) -> None:
    """Size this event loop's thread pools (call it from the app's lifespan)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
    _limiters[asyncio.get_running_loop()] = _Limiters(settings.upload_threads)


def _loop_limiters() -> _Limiters:
    loop = asyncio.get_running_loop()
    limiters = _limiters.get(loop)
    if limiters is None:  # an app run without its lifespan
        limiters = _limiters[loop] = _Limiters(Settings.model_fields["upload_threads"].default)
    return limiters


def upload_gate() -> anyio.CapacityLimiter:
    """This event loop's upload gate (PRIVCLUST_UPLOAD_THREADS): the threads that ingest
    uploads, an upload endpoint's or one started while its body arrives
    (app.datasets.ingest.early)."""
    return _loop_limiters().uploads


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request. It connects lazily, inside the endpoint's thread.

    GET and HEAD requests get a read-only session (`app.kit.db.session.read_session_factory`).
    """
    reads_only = request.method in ("GET", "HEAD")
    factory: sessionmaker[Session] = (
        request.app.state.read_sessionmaker if reads_only else request.app.state.sessionmaker
    )
    session = factory()
    failed = True
    try:
        yield session
        failed = False
    finally:
        if session.in_transaction():
            await anyio.to_thread.run_sync(
                functools.partial(finish, session, failed=failed),
                limiter=_loop_limiters().cleanup,
            )
        else:
            session.close()


async def get_clock_dep(request: Request) -> Clock:
    """The app's clock (app.kit.clock): the wall clock, or the one a test gave create_app."""
    clock: Clock = getattr(request.app.state, "clock", SYSTEM_CLOCK)
    return clock


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
ClockDep = Annotated[Clock, Depends(get_clock_dep)]
SessionDep = Annotated[Session, Depends(get_session)]


class Deferred(abc.ABC):
    """A dependency value that must be resolved in the endpoint's own thread, with its session
    (app.keys.auth.KeyClaim: the API key is checked there, not on a thread hop of its own)."""

    @abc.abstractmethod
    def resolve(self, session: Session | None) -> Any: ...


def resolved_in_worker_thread(dependency: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a dependency whose value is a `Deferred`: only UnitOfWorkRoute's worker-thread path
    resolves it, so an async endpoint may not take it."""
    dependency.resolved_in_worker_thread = True  # type: ignore[attr-defined]
    return dependency


def _call_as_unit_of_work(endpoint: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    sessions = [value for value in kwargs.values() if isinstance(value, Session)]
    try:
        for name, value in kwargs.items():
            if isinstance(value, Deferred):
                kwargs[name] = value.resolve(sessions[0] if sessions else None)
        result = endpoint(**kwargs)
    except BaseException:
        for session in sessions:
            finish(session, failed=True)
        raise
    for session in sessions:
        finish(session, failed=False)
    return result


class UnitOfWorkRoute(APIRoute):
    """Runs a plain (sync) endpoint in a worker thread as one unit of work.

    The request's session is committed (rolled back on error) and closed in the same thread
    that ran the endpoint, before the response is serialized, so its connection is back in the
    pool before the request needs anything else. The endpoint becomes a coroutine for FastAPI,
    which then validates the response on the event loop instead of in yet another thread.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        self.takes_upload = False
        is_async = inspect.iscoroutinefunction(endpoint)
        if not is_async:
            endpoint = self._in_worker_thread(endpoint)
        super().__init__(path, endpoint, **kwargs)
        if is_async and any(
            getattr(d.call, "resolved_in_worker_thread", False) for d in self.dependant.dependencies
        ):
            # Only the worker-thread path swaps a Deferred (the key claim) for its value.
            raise TypeError(f"{path}: an endpoint that takes an API key must be a plain def")
        self.takes_upload = any(
            isinstance(p.field_info, params.File) for p in self.dependant.body_params
        )

    def _in_worker_thread(self, endpoint: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(endpoint)
        async def run(**kwargs: Any) -> Any:
            limiter = _loop_limiters().uploads if self.takes_upload else None
            return await anyio.to_thread.run_sync(
                _call_as_unit_of_work, endpoint, kwargs, limiter=limiter
            )

        return run
