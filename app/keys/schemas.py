"""API keys' request and response models."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.kit.schemas import NOT_BLANK, RequestBody, from_attributes
from app.models import ApiKey, Role

# The roles as the schema states them (an enum of strings), from the one definition.
RoleName = Literal[Role.ADMIN, Role.OWNER, Role.ANALYST, Role.MEMBER]


class ApiKeyCreate(RequestBody):
    model_config = ConfigDict(json_schema_extra={"example": {"tenant": "acme", "role": "owner"}})
    tenant: str = Field(
        min_length=1, max_length=100, pattern=NOT_BLANK, description="Not all blank (trimmed)."
    )
    role: RoleName
    dataset_id: uuid.UUID | None = Field(
        default=None,
        strict=False,  # a UUID arrives as a JSON string
        description="For a `member` key only, and required for it: the tenant's dataset the key "
        "lets a federation's coordinator use, and nothing else.",
    )


class ApiKeyOut(BaseModel):
    id: uuid.UUID
    tenant: str
    role: RoleName
    dataset_id: uuid.UUID | None = Field(description="The dataset a `member` key serves.")
    prefix: str = Field(description="The first characters of the key, to tell keys apart.")
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyOut:
        return from_attributes(cls, key)


class ApiKeyCreated(ApiKeyOut):
    key: str = Field(description="The secret. Shown only in this response; store it now.")
