"""The federation's response models."""

from __future__ import annotations

import base64

from pydantic import BaseModel, Field

from app.datasets.schemas import DatasetOut
from app.federation.service import Seat
from app.models import Role


class SeatOut(BaseModel):
    dataset: DatasetOut = Field(
        description="The member's dataset as an analyst sees it (public metadata: its domain, "
        "columns, noisy row count and budget; never the exact count)."
    )
    public_key: str = Field(description="The seat's X25519 public key, 32 bytes in base64.")
    fingerprint: str = Field(
        description="What the owners of a federation compare out of band: a digest of the "
        "public key (docs/threat-model.md)."
    )

    @classmethod
    def of(cls, seat: Seat) -> SeatOut:
        return cls(
            dataset=DatasetOut.of(seat.dataset, Role.MEMBER),
            public_key=base64.b64encode(seat.public_key).decode("ascii"),
            fingerprint=seat.fingerprint,
        )
