"""A member's own ledger for the federated jobs its dataset takes part in.

A federated job exposes every member's rows, so each member charges it on its own dataset's
ledger, as a central job is charged: `reserve_member_job` when the member key joins the job
(under the dataset's budget lock, against the dataset's cap, the member key's cap and the
paces: two federations racing for one member are admitted one at a time), `commit_member_job`
in the transaction that answers its first release (before its noise share is drawn), and
`refund_member_job` only while no release was answered. The entries name the member job
(app.models.MemberJob) and the member key as their actor, and chain like every entry.
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.kit.clock import SYSTEM_CLOCK
from app.ledger import limits
from app.ledger import repository as repo
from app.ledger.entries import append, dataset_entry
from app.ledger.service import lock_for_admission
from app.ledger.state import RunningBudget
from app.models import LedgerEntry, LedgerKind, MemberJob


def reserve_member_job(session: Session, member_job: MemberJob, note: str) -> None:
    """Admit `member_job` (not yet added) on its dataset against every limit, or raise
    BudgetExceeded (or the subclass naming the limit) with nothing charged. The caller opened
    the transaction with `begin_budget_transaction` and commits."""
    dataset = lock_for_admission(session, member_job.dataset_id)
    held = limits.read(session, dataset, member_job.key_id, SYSTEM_CLOCK.now(), lock=True)
    needs = f"this federated job needs mu={member_job.mu:.6g} on the member's dataset"
    if refused := limits.refusal(held, member_job.mu, needs):
        raise refused
    session.add(member_job)
    limits.charge(held, member_job.mu)
    append(session, held.row, _entry(member_job, LedgerKind.RESERVE, note))


def _entry(member_job: MemberJob, kind: LedgerKind, note: str | None = None) -> LedgerEntry:
    return dataset_entry(
        member_job.dataset_id,
        kind,
        member_job.key_id,
        note,
        job_id=member_job.id,
        mu=member_job.mu,
    )


def _reservation(session: Session, member_job: MemberJob) -> set[str]:
    return {e.kind for e in repo.all_ledger_entries_for_job(session, member_job.id)}


def commit_member_job(session: Session, member_job: MemberJob) -> None:
    """The member is about to draw its first noise share for the job: the spend is final.
    Does nothing when it was committed already."""
    kinds = _reservation(session, member_job)
    if LedgerKind.COMMIT in kinds:
        return
    if LedgerKind.REFUND in kinds or LedgerKind.RESERVE not in kinds:
        raise RuntimeError("a member job without a live reservation cannot draw noise")
    limits.move_key(session, member_job.dataset_id, member_job.key_id, "committed", member_job.mu)
    row = repo.budget_row(session, member_job.dataset_id, for_update=True)
    assert row is not None
    moved = RunningBudget.of_row(row).committed(member_job.mu)
    append(session, row, _entry(member_job, LedgerKind.COMMIT), moved)


def refund_member_job(session: Session, member_job: MemberJob, note: str) -> bool:
    """Give the reservation back if the member answered no release (no commit); False when
    the job was committed (its charge stays)."""
    kinds = _reservation(session, member_job)
    if LedgerKind.COMMIT in kinds:
        return False
    if LedgerKind.REFUND in kinds:
        return True
    limits.move_key(session, member_job.dataset_id, member_job.key_id, "refunded", member_job.mu)
    row = repo.budget_row(session, member_job.dataset_id, for_update=True)
    assert row is not None
    moved = RunningBudget.of_row(row).refunded(member_job.mu)
    append(session, row, _entry(member_job, LedgerKind.REFUND, note), moved)
    return True


def member_job_mus(session: Session, dataset_id: uuid.UUID) -> dict[uuid.UUID, float]:
    """The mu each member job on the dataset charged (what `verify` holds its commits to)."""
    return repo.member_job_mus(session, dataset_id)
