"""Request dependencies: settings, one DB session per request, the calling API key and its role.

A pooled database connection is only ever held by a thread that is running: a request's
session connects inside the thread that runs its endpoint and is committed and closed in that
same thread (`UnitOfWorkRoute`), which is also where the API key is checked (`KeyClaim`).
Holding a connection while waiting for a free thread (to serialize a response, or to run the
endpoint after authentication) deadlocked the server under concurrent polling: every thread
waited for a connection held by a request that waited for a thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from fastapi import Depends, Query, Request, params
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from app.keys import service as keys_service
from app.kit.config import Settings
from app.kit.db.session import finish
from app.kit.errors import Forbidden
from app.models import ApiKey, Role

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")

# The query parameters of every paginated list (newest first; `next_cursor` of the last page).
PageLimit = Annotated[int, Query(ge=1, le=200)]
PageCursor = Annotated[
    str | None,
    Query(
        max_length=400,
        pattern=r"^[A-Za-z0-9_-]*$",
        description="The `next_cursor` of the previous page (opaque; only those work).",
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


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]


@dataclass(frozen=True)
class KeyClaim:
    """The API key a request presented, checked later in the thread that runs its endpoint.

    Checking it on its own thread hop, in its own session, cost a second trip through the
    thread pool and a second transaction on every request: under 200 pollers on SQLite about
    a quarter of the API's CPU per poll (2.23 -> 1.72 ms, bench/RESULTS.md). `UnitOfWorkRoute`
    replaces the claim with the `ApiKey` (or raises 401/403) before the endpoint runs, so
    endpoints still receive an `ApiKey`.
    A request that also fails validation is answered 401/403 first, as before: see
    `check_claim_before_validation`.
    """

    secret: str | None
    roles: tuple[str, ...] | None  # the roles that may call the route; None: any valid key
    reads_only: bool  # GET/HEAD: the key may be read in the endpoint's own transaction
    sessions: sessionmaker[Session]


def _claim(request: Request, creds: HTTPAuthorizationCredentials | None, *roles: str) -> KeyClaim:
    claim = KeyClaim(
        secret=creds.credentials if creds else None,
        roles=roles or None,
        reads_only=request.method in ("GET", "HEAD"),
        sessions=request.app.state.sessionmaker,
    )
    request.state.key_claim = claim
    return claim


def resolve_claim(claim: KeyClaim, session: Session | None = None) -> ApiKey:
    """The claim's `ApiKey`, or Unauthorized/Forbidden.

    Read in `session` when given and the request only reads. A request that writes reads the
    key in a short session of its own, so that its own transaction still starts with the
    statement that needs it (on SQLite a write transaction must take its lock at BEGIN: a read
    transaction upgraded later fails with "database is locked" once another writer committed).
    """
    if session is not None and claim.reads_only:
        key = keys_service.authenticate(session, claim.secret)
    else:
        with claim.sessions() as own:
            key = keys_service.authenticate(own, claim.secret)
    if claim.roles:
        require(key, *claim.roles)
    return key


async def get_current_key(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> KeyClaim:
    return _claim(request, creds)


# Endpoints receive the resolved `ApiKey` (UnitOfWorkRoute swaps it in for the claim).
CurrentKey = Annotated[ApiKey, Depends(get_current_key)]


def require(key: ApiKey, *roles: str) -> None:
    if key.role not in roles:
        raise Forbidden(
            f"this needs a key with role {' or '.join(roles)}; yours is {key.role}",
            code="forbidden-role",
        )


async def get_tenant_member(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> KeyClaim:
    return _claim(request, creds, Role.OWNER, Role.ANALYST)


TenantKey = Annotated[ApiKey, Depends(get_tenant_member)]


async def check_claim_before_validation(request: Request) -> None:
    """Raise the 401/403 a request's key earns, if any, before its 422 is sent.

    FastAPI solves a route's dependencies before it validates the parameters, so a request
    with an invalid body has its claim recorded but never checked; a caller without a valid
    key learns nothing about what the route would have accepted.
    """
    claim = getattr(request.state, "key_claim", None)
    if isinstance(claim, KeyClaim):
        await anyio.to_thread.run_sync(resolve_claim, claim)


def _call_as_unit_of_work(endpoint: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    sessions = [value for value in kwargs.values() if isinstance(value, Session)]
    try:
        for name, value in kwargs.items():
            if isinstance(value, KeyClaim):
                kwargs[name] = resolve_claim(value, sessions[0] if sessions else None)
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
            d.call in (get_current_key, get_tenant_member) for d in self.dependant.dependencies
        ):
            # Only the worker-thread path swaps the KeyClaim for the checked ApiKey.
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
