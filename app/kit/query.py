"""What a request asks for: a list's page and filters, as routes hand them to services and
services to repositories; and the digest of a request's body that an idempotency key is held to."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ListQuery:
    """A page of one tenant's list: how many, after which cursor, and the list's filters
    (`dataset_id`; `status` for a table that has one)."""

    tenant: str
    limit: int
    cursor: str | None = None
    dataset_id: uuid.UUID | None = None
    status: str | None = None


def body_digest(body: Mapping[str, Any]) -> str:
    """A digest of a request's body (JSON with sorted keys): an Idempotency-Key replays a
    request only for a body with the same digest."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
