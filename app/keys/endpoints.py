"""API keys: create (secret shown once), list without secrets, revoke (admin only); and the
calling key itself (any role), so a client such as the web console can tell what it may do."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from app.keys import service as keys_service
from app.keys.auth import AdminKey, CurrentKey
from app.keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyOut
from app.kit.deps import PageCursor, PageLimit, SessionDep, UnitOfWorkRoute
from app.kit.problems import responses
from app.kit.schemas import Page

router = APIRouter(prefix="/v1/api-keys", tags=["keys"], route_class=UnitOfWorkRoute)
me_router = APIRouter(prefix="/v1", tags=["keys"], route_class=UnitOfWorkRoute)


@router.post("", status_code=201, response_model=ApiKeyCreated, responses=responses(401, 403, 422))
def keys_create(body: ApiKeyCreate, session: SessionDep, key: AdminKey) -> ApiKeyCreated:
    """Create an API key (admin only). The secret `key` is shown in this response only.

    A `member` key (with `dataset_id`) lets a federation's coordinator use that one dataset in
    federated jobs, and nothing else."""
    created = keys_service.create_and_commit(
        session, tenant=body.tenant, role=body.role, dataset_id=body.dataset_id
    )
    return ApiKeyCreated(**ApiKeyOut.of(created.key).model_dump(), key=created.secret)


@router.get("", response_model=Page[ApiKeyOut], responses=responses(401, 403, 422))
def keys_list(
    session: SessionDep,
    key: AdminKey,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
    tenant: str | None = None,
) -> Page[ApiKeyOut]:
    items, nxt = keys_service.list_keys(session, limit, cursor, tenant)
    return Page[ApiKeyOut](items=[ApiKeyOut.of(k) for k in items], next_cursor=nxt)


@router.delete("/{key_id}", response_model=ApiKeyOut, responses=responses(401, 403, 404))
def keys_revoke(key_id: uuid.UUID, session: SessionDep, key: AdminKey) -> ApiKeyOut:
    """Revoke an API key (admin only); it stops working at once."""
    revoked = keys_service.revoke_and_commit(session, key_id)
    return ApiKeyOut.of(revoked)


@me_router.get("/me", response_model=ApiKeyOut, responses=responses(401, validation=False))
def keys_me(key: CurrentKey) -> ApiKeyOut:
    """The calling key (any role): its tenant, role and prefix, never its secret."""
    return ApiKeyOut.of(key)
