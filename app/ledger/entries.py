"""A ledger entry: what it holds, and its append to the dataset's ledger and hash chain.

Only app.ledger.service appends, always through `append`, under the dataset's budget lock and
in the transaction that moves the running budget (the chain: app.ledger.chain).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.kit import repository as kit_repo
from app.ledger import chain
from app.ledger.state import RunningBudget
from app.models import DatasetBudget, Job, LedgerEntry, LedgerKind


def job_entry(
    job: Job,
    kind: LedgerKind | str,
    note: str | None = None,
    actor: uuid.UUID | None = None,
    **cost: Any,
) -> LedgerEntry:
    """An entry about `job` (on its dataset, under its sweep if any), with the part of its
    cost the kind records (`cost`: mu, sigma, releases, epsilon, delta)."""
    return dataset_entry(
        job.dataset_id, kind, actor, note, job_id=job.id, sweep_id=job.sweep_id, **cost
    )


def dataset_entry(
    dataset_id: uuid.UUID, kind: LedgerKind | str, actor: uuid.UUID | None, note: str | None,
    **columns: Any,
) -> LedgerEntry:  # fmt: skip
    """An entry on a dataset's ledger; `columns` are the rest of its columns (the job and
    sweep it is about, and what it costs)."""
    return LedgerEntry(dataset_id=dataset_id, kind=kind, actor_key_id=actor, note=note, **columns)


def append(
    session: Session, row: DatasetBudget, entry: LedgerEntry, moved: RunningBudget | None = None
) -> None:
    """Append `entry` to its dataset's ledger and hash chain, moving the running budget to
    `moved` in the same transaction (None: an audit entry, which leaves it as it is).

    The caller holds the budget's lock (`row`, locked until commit, or a row not yet
    committed), so the entries of one dataset are appended one at a time and each one's
    `prev_hash` is the hash of the entry before it."""
    if moved is not None:
        moved.write_to(row)
    row.updated_at = entry.created_at = kit_repo.now()
    entry.prev_hash = row.last_hash
    entry.entry_hash = chain.seal(row.last_hash, entry, RunningBudget.of_row(row))
    row.last_hash = entry.entry_hash
    kit_repo.add(session, entry)
    session.flush()  # the row's new head is written before anything reads the row again
