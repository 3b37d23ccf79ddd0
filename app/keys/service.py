"""API keys: creation (secret shown once, sha256 at rest), lookup, revocation, admin bootstrap."""

from __future__ import annotations

import hashlib
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from app.keys import repository as repo
from app.kit import repository as kit_repo
from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter, NotFound, Unauthorized
from app.models import ApiKey, MemberSeat, Role
from privclust.federation.keys import MemberKey as FederationKey

ROLES = tuple(Role)
ADMIN_TENANT = "admin"
KEY_PREFIX = "pck_"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str


def create_key(
    session: Session, *, tenant: str, role: str, dataset_id: uuid.UUID | None = None
) -> CreatedKey:
    if role not in ROLES:
        raise InvalidParameter(f"role must be one of {', '.join(ROLES)}", field="role")
    tenant = tenant.strip()
    if not tenant or len(tenant) > 100:
        raise InvalidParameter("tenant must be 1 to 100 characters", field="tenant")
    check_scope(session, tenant, role, dataset_id)
    secret = new_secret()
    key = ApiKey(
        id=uuid.uuid4(),
        tenant=tenant,
        role=role,
        key_hash=hash_key(secret),
        prefix=secret[:12],
        dataset_id=dataset_id,
    )
    kit_repo.add(session, key)
    if role == Role.MEMBER:
        # The seat's X25519 key is born with the member key, from OS entropy; its private half
        # never leaves this server (privclust.federation.keys).
        seat = FederationKey.generate()
        kit_repo.add(
            session,
            MemberSeat(key_id=key.id, private_key=seat.private_bytes(), public_key=seat.public),
        )
    return CreatedKey(key=key, secret=secret)


def check_scope(session: Session, tenant: str, role: str, dataset_id: uuid.UUID | None) -> None:
    """A `member` key names one of the tenant's datasets whose rows still exist; no other role
    names a dataset."""
    if role != Role.MEMBER:
        if dataset_id is not None:
            raise InvalidParameter("only a member key names a dataset", field="dataset_id")
        return
    if dataset_id is None:
        raise InvalidParameter("a member key needs the dataset it serves", field="dataset_id")
    dataset = repo.dataset_of_tenant(session, dataset_id, tenant)
    if dataset is None or dataset.deleted_at is not None:
        raise InvalidParameter(
            "no such dataset of this tenant with its rows (a member key serves one)",
            field="dataset_id",
        )


def create_and_commit(
    session: Session, *, tenant: str, role: str, dataset_id: uuid.UUID | None = None
) -> CreatedKey:
    """`create_key` as a request's whole unit of work."""
    created = create_key(session, tenant=tenant, role=role, dataset_id=dataset_id)
    session.commit()
    return created


def list_keys(
    session: Session, limit: int, cursor: str | None, tenant: str | None = None
) -> tuple[list[ApiKey], str | None]:
    """A page of API keys (newest first), optionally of one tenant; secrets are never stored."""
    return repo.list_api_keys(session, limit, cursor, tenant)


def authenticate(session: Session, secret: str | None) -> ApiKey:
    if not secret:
        raise Unauthorized(
            "missing API key: send 'Authorization: Bearer <key>'", code="missing-api-key"
        )
    key = repo.api_key_by_hash(session, hash_key(secret))
    if key is None or key.revoked_at is not None:
        raise Unauthorized("invalid or revoked API key", code="invalid-api-key")
    return key


def revoke_key(session: Session, key_id: uuid.UUID) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound("no such API key")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key


def revoke_and_commit(session: Session, key_id: uuid.UUID) -> ApiKey:
    """`revoke_key` as a request's whole unit of work: the key stops working at once."""
    key = revoke_key(session, key_id)
    session.commit()
    return key


def ensure_admin_token(session: Session, token: str) -> None:
    """Make a configured PRIVCLUST_ADMIN_TOKEN a valid admin key (idempotent)."""
    digest = hash_key(token)
    if repo.api_key_by_hash(session, digest) is None:
        kit_repo.add(
            session,
            ApiKey(tenant=ADMIN_TENANT, role=Role.ADMIN, key_hash=digest, prefix=token[:12]),
        )


def bootstrap_admin(session: Session, configured: str | None, data_dir: Path) -> str | None:
    """On first start make sure an admin can log in.

    With a configured token, register it. Otherwise, if no admin key exists yet, generate one,
    keep it in DATA_DIR/admin-token (mode 0600, for the local single-user setup) and return it so
    the caller prints it once. Returns the newly generated secret, or None.
    """
    if configured:
        ensure_admin_token(session, configured)
        return None
    if repo.active_admin_exists(session):
        return None
    created = create_key(session, tenant=ADMIN_TENANT, role=Role.ADMIN)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "admin-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(created.secret + "\n")
    return created.secret
