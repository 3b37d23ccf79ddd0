"""The ledger's hash chain: each entry sealed over its content, the running budget it leaves,
and the hash of the dataset's entry before it.

An entry changed, removed, inserted or moved to another dataset after it was written no longer
matches its own hash or the next entry's `prev_hash`, so `privclust ledger verify` names it.
The chain's head is kept on the dataset's running budget (`DatasetBudget.last_hash`), which
every writer locks anyway: appending reads one row, and no request ever walks the chain.
Whoever can rewrite the whole database can also rebuild the chain; `verify` prints each
dataset's head so that an operator can keep the heads outside it and compare them later.

The canonical form is a JSON list of (name, value) pairs, floats written exactly
(`float.hex`), times in UTC to the microsecond. Migration 0008_ledger_chain writes the same
form out for the entries that existed before it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from app.ledger.state import GENESIS, RunningBudget, RunningFold, square_text
from privclust.privacy.gdp import PrivacyParameterError

__all__ = ["GENESIS", "ChainWalk", "canonical", "seal"]


class Sealed(Protocol):
    """What the chain reads of an entry (a LedgerEntry)."""

    dataset_id: uuid.UUID
    kind: str
    job_id: uuid.UUID | None
    sweep_id: uuid.UUID | None
    actor_key_id: uuid.UUID | None
    mu: float | None
    sigma: float | None
    releases: int | None
    epsilon: float | None
    delta: float | None
    note: str | None
    created_at: datetime


def _id(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def _float(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


def _time(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(entry: Sealed, after: RunningBudget) -> bytes:
    """Every field of the entry that means something, and the running budget after it."""
    fields = [
        ("dataset", _id(entry.dataset_id)),
        ("kind", str(entry.kind)),
        ("job", _id(entry.job_id)),
        ("sweep", _id(entry.sweep_id)),
        ("actor", _id(entry.actor_key_id)),
        ("mu", _float(entry.mu)),
        ("sigma", _float(entry.sigma)),
        ("releases", entry.releases),
        ("epsilon", _float(entry.epsilon)),
        ("delta", _float(entry.delta)),
        ("note", entry.note),
        ("time", _time(entry.created_at)),
        ("mu_cap", _float(after.mu_cap)),
        ("spent_sq", square_text(after.spent_sq)),
        ("reserved_sq", square_text(after.reserved_sq)),
        ("jobs", after.jobs),
    ]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()


def seal(prev_hash: str, entry: Sealed, after: RunningBudget) -> str:
    """The entry's hash: SHA-256 over the previous entry's hash and the canonical content."""
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + canonical(entry, after)).hexdigest()


def name(entry: Sealed, entry_id: int) -> str:
    """How verify names an entry: its id, kind and job."""
    about = f" of job {entry.job_id}" if entry.job_id is not None else ""
    return f"entry {entry_id} ({entry.kind}{about})"


class Chained(Sealed, Protocol):
    id: int
    prev_hash: str
    entry_hash: str


@dataclass
class ChainWalk:
    """Follows one dataset's entries in id order and names each one that breaks the chain.

    Each entry is checked against its neighbour's stored hash, so a changed entry is named
    alone; the running budget it seals is the fold of the entries before it, so a changed
    amount also breaks the entries after it."""

    fold: RunningFold = field(default_factory=RunningFold)
    head: str = GENESIS
    breaks: list[str] = field(default_factory=list)

    def follow(self, entry: Chained) -> None:
        try:
            after: RunningBudget | None = self.fold.step(entry)
        except (PrivacyParameterError, ArithmeticError):
            after = None
        if entry.prev_hash != self.head:
            self.breaks.append(
                f"{name(entry, entry.id)} does not follow the entry before it: an entry was "
                "removed, inserted or moved here"
            )
        elif after is None or seal(entry.prev_hash, entry, after) != entry.entry_hash:
            self.breaks.append(
                f"{name(entry, entry.id)} does not match its hash: it was changed after it was "
                "written"
            )
        self.head = entry.entry_hash

    def end(self, last_hash: str | None) -> None:
        """The running budget's head must be the last entry's hash (else entries after it were
        removed, or the head was rewritten)."""
        if last_hash is not None and last_hash != self.head:
            self.breaks.append(
                f"the chain's head {last_hash[:12]} is not its last entry's hash "
                f"{self.head[:12]}: entries at its end were removed or the head was rewritten"
            )
