"""Request dependencies: settings, one DB session per request, the calling API key and its role."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.config import Settings
from app.db.models import ApiKey
from app.db.session import unit_of_work
from app.errors import Forbidden
from app.services import keys as keys_service

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    """One session per request: commit on success, roll back on any error."""
    with unit_of_work(request.app.state.sessionmaker) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]


def get_current_key(
    session: SessionDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> ApiKey:
    return keys_service.authenticate(session, creds.credentials if creds else None)


CurrentKey = Annotated[ApiKey, Depends(get_current_key)]


def require(key: ApiKey, *roles: str) -> None:
    if key.role not in roles:
        raise Forbidden(
            f"this needs a key with role {' or '.join(roles)}; yours is {key.role}",
            code="forbidden-role",
        )


def get_tenant_member(key: CurrentKey) -> ApiKey:
    require(key, "owner", "analyst")
    return key


TenantKey = Annotated[ApiKey, Depends(get_tenant_member)]
