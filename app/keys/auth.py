"""Who is calling: the API key a request presents, checked in the endpoint's own thread.

Endpoints take `CurrentKey` (any valid key) or `TenantKey` (an owner's or analyst's key) and
receive the checked `ApiKey`; `require` refuses a role with 403. The key is read where the
endpoint runs, in its unit of work (app.kit.deps.UnitOfWorkRoute), never on a thread hop of its
own.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from app.keys import service as keys_service
from app.kit.deps import Deferred, resolved_in_worker_thread
from app.kit.errors import Forbidden
from app.models import ApiKey, Role

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")


@dataclass(frozen=True)
class KeyClaim(Deferred):
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

    def resolve(self, session: Session | None) -> ApiKey:
        return resolve_claim(self, session)


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


@resolved_in_worker_thread
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


def key_with_role(*roles: str) -> Callable[..., Coroutine[Any, Any, KeyClaim]]:
    """A dependency that takes only keys of `roles`: any other is refused with 403 before the
    request's body is looked at (`check_claim_before_validation`)."""

    @resolved_in_worker_thread
    async def get_key(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> KeyClaim:
        return _claim(request, creds, *roles)

    return get_key


get_tenant_member = key_with_role(Role.OWNER, Role.ANALYST)
TenantKey = Annotated[ApiKey, Depends(get_tenant_member)]
# An admin's key.
AdminKey = Annotated[ApiKey, Depends(key_with_role(Role.ADMIN))]
# A `member` key: the only routes it may call are the federation's (app.federation).
MemberApiKey = Annotated[ApiKey, Depends(key_with_role(Role.MEMBER))]


async def check_claim_before_validation(request: Request) -> None:
    """Raise the 401/403 a request's key earns, if any, before its 422 is sent.

    FastAPI solves a route's dependencies before it validates the parameters, so a request
    with an invalid body has its claim recorded but never checked; a caller without a valid
    key learns nothing about what the route would have accepted.
    """
    claim = getattr(request.state, "key_claim", None)
    if isinstance(claim, KeyClaim):
        await anyio.to_thread.run_sync(resolve_claim, claim)
