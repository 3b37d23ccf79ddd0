"""SQLAlchemy models of a federation: a member key's seat (its X25519 key), the federated jobs
a member joined and the masked words it answered; a coordinator's keys to its members."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.kit.db.base import Base, utcnow
from app.models import JobStatus


class FederationMemberKey(Base):
    """The key a coordinator calls one member of a federated dataset with (never shown)."""

    __tablename__ = "federation_member_keys"

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    secret: Mapped[str] = mapped_column(Text)


class MemberSeat(Base):
    """A member key's seat in federations: the X25519 key its masks are agreed with
    (privclust.federation.keys). The private key never leaves this server; owners compare the
    public key's fingerprint out of band (docs/threat-model.md)."""

    __tablename__ = "member_seats"

    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), primary_key=True)
    private_key: Mapped[bytes] = mapped_column(LargeBinary(32))
    public_key: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemberJob(Base):
    """A federated job a member key joined: its plan, its charge, the mu^2 answered so far and,
    once it succeeded, the centres the coordinator released."""

    __tablename__ = "member_jobs"
    __table_args__ = (UniqueConstraint("key_id", "federation", "job", name="uq_member_jobs"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), index=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    federation: Mapped[str] = mapped_column(String(100))
    job: Mapped[str] = mapped_column(String(100))
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    mu: Mapped[float] = mapped_column(Float)
    answered_sq: Mapped[str] = mapped_column(Text, default="0/1")
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.RUNNING)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # The released centres (public), stored when the job ends succeeded: its owner's labels.
    centers: Mapped[list[list[float]] | None] = mapped_column(JSON, default=None)


class MemberAnswer(Base):
    """The masked words a member answered for one release (a repeated request gets them)."""

    __tablename__ = "member_answers"

    member_job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("member_jobs.id"), primary_key=True)
    release: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_digest: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[str] = mapped_column(String(32))  # who computes it while words are empty
    words: Mapped[bytes] = mapped_column(LargeBinary)
    mu_sq: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
