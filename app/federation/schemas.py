"""The federation's response models."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, FiniteFloat

from app.datasets.schemas import DatasetOut
from app.federation.member import Join
from app.federation.service import Seat
from app.kit.schemas import RequestSchema, from_attributes
from app.models import MemberJob, Role


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


class DomainTerms(RequestSchema):
    """The declared terms every member of a federation shares (public)."""

    columns: list[str]
    domain_kind: str
    radius: float
    center: list[float]
    lower: list[float] | None = None
    upper: list[float] | None = None
    table_spec: dict[str, Any] | None = None


class MemberJoin(RequestSchema):
    """A coordinator's request that this member take part in one federated job."""

    federation: str = Field(min_length=1, max_length=100, description="The federation's id.")
    job: str = Field(min_length=1, max_length=100, description="The coordinator's job id.")
    method: str = Field(
        description="count (the federated dataset's noisy row count), fastlloyd, pe-means or "
        "pe-lloyd."
    )
    mu: float = Field(gt=0, allow_inf_nan=False, description="What the job costs (mu-GDP).")
    dtype: str = Field(description="How the rows are read: float32 or float64.")
    members: list[str] = Field(
        min_length=2,
        max_length=16,
        description="Every member's X25519 public key (base64), in the federation's order.",
    )
    colluding: int = Field(default=0, ge=0, le=15, description="c, the colluding members.")
    domain: DomainTerms

    def request(self) -> Join:
        """The join as the member's service takes it: field for field, the domain terms as a
        plain dict."""
        return Join(**self.model_dump())


class MemberJobOut(BaseModel):
    id: uuid.UUID = Field(description="The member job's id (the path of its releases).")
    federation: str
    job: str
    method: str
    mu: float = Field(description="What the member's own ledger charged for the job.")
    status: str = Field(
        description="running, succeeded, failed, or cancelled (ended before this member "
        "answered a release: its charge refunded)."
    )
    releases: int = Field(description="How many releases the member answered.")

    @classmethod
    def of(cls, job: MemberJob, releases: int = 0) -> MemberJobOut:
        return from_attributes(cls, job, method=str(job.plan["method"]), releases=releases)


class ReleaseIn(RequestSchema):
    """One release: the pass (privclust.federation.passes) and one noise per array."""

    pass_: dict[str, Any] = Field(alias="pass", description="The encoded pass.")
    noises: list[dict[str, Any]] = Field(description="{sensitivity, sigma, weight} per array.")
    bits: int = Field(
        default=64,
        description="The ring the masked words are in: 64 (modulo 2^64), or 32 (modulo 2^32, "
        "a vote histogram only).",
    )

    def body(self) -> dict[str, Any]:
        return {"pass": self.pass_, "noises": self.noises, "bits": self.bits}


class ReleaseOut(BaseModel):
    release: int
    words: str = Field(
        description="The member's masked vector: little-endian words of the request's bits "
        "(uint64 or uint32), in base64."
    )


class FinishIn(RequestSchema):
    succeeded: bool = Field(description="Whether the coordinator's job succeeded.")
    centers: list[list[FiniteFloat]] | None = Field(
        default=None,
        max_length=10_000,
        description="A job that succeeded: the centres it released (public), k rows of the "
        "dataset's d columns, from which the member's owner labels its own rows.",
    )


class FederatedJobOut(BaseModel):
    """A federated job the dataset's member key joined, as its owner sees it: public metadata
    only, never a statistic, a noise share or a count of its rows."""

    id: uuid.UUID = Field(description="The member job's id (the path of its labels).")
    federation: str = Field(description="The federation's id.")
    job: str = Field(description="The coordinator's job id.")
    status: str = Field(description="running, succeeded, failed or cancelled.")
    created_at: datetime
    finished_at: datetime | None
    labels: bool = Field(
        description="Whether the job's released centres are stored: its labels can be downloaded."
    )

    @classmethod
    def of(cls, job: MemberJob) -> FederatedJobOut:
        return from_attributes(cls, job, labels=job.centers is not None)
