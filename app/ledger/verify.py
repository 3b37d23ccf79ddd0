"""The check that a dataset's running budget is what its ledger replays to, exactly, that its
entries form an unbroken hash chain (app.ledger.chain), and that every `commit` entry charged
what its job row says (mu, sigma, releases) and, when the caller gives a `PlanCheck`, what the
job's plan says.

All of it is read in one snapshot (SQLite's transaction; REPEATABLE READ on PostgreSQL), so a check
that runs while jobs are admitted and run compares a running budget with exactly the entries
written with it. Used by `privclust ledger verify` and, a bounded batch at a time, by the API's
sweeper (`check_pass`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.kit.db.session import unit_of_work
from app.ledger import repository as repo
from app.ledger.chain import ChainWalk, name
from app.ledger.state import GENESIS, KeyReplay, RunningBudget, replay
from app.models import Dataset, Job, LedgerEntry, LedgerKind
from privclust.privacy import budget as bmath
from privclust.privacy.gdp import PrivacyParameterError

SNAPSHOT = {"isolation_level": "REPEATABLE READ"}
SHOWN_BREAKS = 5  # entries named per dataset; the rest are counted

# Whether a job's plan, made again from public inputs, is what its row charged: None if so,
# else what differs (app.jobs.planning.plan_mismatch).
PlanCheck = Callable[[Job, Dataset], str | None]


@dataclass(frozen=True)
class KeyCheck:
    """One capped key's check: its running budget as stored and as the replay of its jobs'
    entries gives it, under the stored cap; and whether its spend is within that cap."""

    key_id: uuid.UUID
    stored: RunningBudget
    replayed: RunningBudget | None

    @property
    def within_cap(self) -> bool:
        return bmath.exact_square(self.stored.mu_cap) >= self.stored.used_sq

    @property
    def agrees(self) -> bool:
        return self.stored == self.replayed and self.within_cap

    def describe(self) -> str:
        if self.replayed is None:
            return f"key {self.key_id}: the ledger holds a mu no budget can"
        parts = [
            f"{field} stored {getattr(self.stored, field)} replayed {getattr(self.replayed, field)}"
            for field in ("spent_sq", "reserved_sq", "jobs")
            if getattr(self.stored, field) != getattr(self.replayed, field)
        ]
        if not self.within_cap:
            parts.append(f"spend above its cap (mu_cap={self.stored.mu_cap})")
        return f"key {self.key_id}: " + "; ".join(parts)


@dataclass(frozen=True)
class Check:
    """One dataset's check: the running budget as stored (None: there is none) and as the
    replay of its `entries` entries gives it (None: the replay holds a value that no running
    budget can, e.g. a negative or non-finite mu)."""

    dataset_id: uuid.UUID
    entries: int
    stored: RunningBudget | None
    replayed: RunningBudget | None
    dataset_mu_cap: float
    # Each entry that breaks the chain or charged other than its job, named.
    breaks: tuple[str, ...] = ()
    head: str = GENESIS
    keys: tuple[KeyCheck, ...] = ()

    @property
    def agrees(self) -> bool:
        return (
            self.stored is not None
            and self.stored == self.replayed
            and self.stored.mu_cap == self.dataset_mu_cap
            and not self.breaks
            and all(key.agrees for key in self.keys)
        )

    def describe(self) -> str:
        """One line: what differs."""
        if self.agrees:
            capped = f" and {len(self.keys)} key caps" if self.keys else ""
            return (
                f"dataset {self.dataset_id}: running budget{capped} agree with "
                f"{self.entries} entries; chain head {self.head}"
            )
        if self.breaks:
            shown = "; ".join(self.breaks[:SHOWN_BREAKS])
            more = len(self.breaks) - SHOWN_BREAKS
            return f"dataset {self.dataset_id}: BROKEN: {shown}" + (
                f"; and {more} more" if more > 0 else ""
            )
        if self.stored == self.replayed and self.stored is not None:
            wrong = "; ".join(k.describe() for k in self.keys if not k.agrees)
            return f"dataset {self.dataset_id}: KEY MISMATCH over {self.entries} entries: {wrong}"
        if self.stored is None:
            return f"dataset {self.dataset_id}: no running budget ({self.entries} entries)"
        if self.replayed is None:
            return f"dataset {self.dataset_id}: the ledger holds a mu no budget can"
        parts = [
            f"{name} stored {getattr(self.stored, name)} replayed {getattr(self.replayed, name)}"
            for name in ("mu_cap", "spent_sq", "reserved_sq", "jobs")
            if getattr(self.stored, name) != getattr(self.replayed, name)
        ]
        if self.stored.mu_cap != self.dataset_mu_cap:
            parts.append(f"dataset mu_cap {self.dataset_mu_cap} running {self.stored.mu_cap}")
        return f"dataset {self.dataset_id}: MISMATCH over {self.entries} entries: " + "; ".join(
            parts
        )


def _snapshot(session: Session) -> None:
    """Make the session's next transaction one snapshot (SQLite's transactions already are)."""
    if session.get_bind().dialect.name != "sqlite":
        session.connection(execution_options=SNAPSHOT)


def charge_breaks(
    entry: LedgerEntry, job: Job | None, dataset: Dataset, plan_check: PlanCheck | None
) -> list[str]:
    """What a `commit` entry charged that its job row (or the job's plan) does not say."""
    label = name(entry, entry.id)
    if job is None:
        return [f"{label}: there is no such job on this dataset"]
    found = [
        f"{label}: {field} {getattr(entry, field)!r} but its job row says {getattr(job, field)!r}"
        for field in ("mu", "sigma", "releases")
        if getattr(entry, field) != getattr(job, field)
    ]
    mismatch = None if plan_check is None else plan_check(job, dataset)
    if mismatch is not None:
        found.append(f"{label}: its job's plan made again differs: {mismatch}")
    return found


def member_charge_breaks(entry: LedgerEntry, mu: float) -> list[str]:
    """What a member job's `commit` charged that its member job row does not say."""
    if entry.mu != mu:
        return [f"{name(entry, entry.id)}: mu {entry.mu!r} but its member job says {mu!r}"]
    return []


def check_dataset(
    session: Session, dataset_id: uuid.UUID, plan_check: PlanCheck | None = None
) -> Check | None:
    """Replay the dataset's ledger, follow its hash chain and compare what each commit charged
    with its job (None: no such dataset). Reads the whole ledger: for the CLI and the sweeper,
    never for a request. Call it at the start of a transaction (`check`/`check_all` do)."""
    _snapshot(session)
    dataset = repo.dataset_by_id(session, dataset_id)
    if dataset is None:
        return None
    row = repo.budget_row(session, dataset_id)
    jobs = repo.jobs_of_dataset(session, dataset_id)
    member_jobs = repo.member_job_mus(session, dataset_id)
    walk = ChainWalk()
    key_rows = repo.key_budget_rows(session, dataset_id)
    keys = KeyReplay(r.key_id for r in key_rows)
    count = 0

    def followed() -> Iterator[LedgerEntry]:
        nonlocal count
        for entry in repo.streamed_entries(session, dataset_id):
            count += 1
            walk.follow(entry)
            if entry.kind == LedgerKind.COMMIT and entry.job_id in member_jobs:
                walk.breaks += member_charge_breaks(entry, member_jobs[entry.job_id])
            elif entry.kind == LedgerKind.COMMIT and entry.job_id is not None:
                job = jobs.get(entry.job_id)
                walk.breaks += charge_breaks(entry, job, dataset, plan_check)
            keys.feed(entry)
            yield entry

    state = replay(followed())
    walk.end(None if row is None else row.last_hash)
    replayed = _running_or_none(lambda: RunningBudget.of_state(state))
    stored = None if row is None else RunningBudget.of_row(row)
    key_checks = tuple(
        KeyCheck(
            r.key_id,
            RunningBudget.of_row(r),
            _running_or_none(lambda r=r: keys.running(r.key_id, r.mu_cap)),  # type: ignore[misc]
        )
        for r in key_rows
    )
    mu_cap = float(dataset.mu_cap)
    breaks = tuple(walk.breaks)
    return Check(dataset_id, count, stored, replayed, mu_cap, breaks, walk.head, key_checks)


def _running_or_none(fold: Callable[[], RunningBudget]) -> RunningBudget | None:
    """The replay's running budget; None when it holds a value no running budget can (a
    negative or non-finite mu)."""
    try:
        return fold()
    except (PrivacyParameterError, ArithmeticError):
        return None


def check(
    sessions: sessionmaker[Session], dataset_id: uuid.UUID, plan_check: PlanCheck | None = None
) -> Check | None:
    """`check_dataset` in a transaction of its own."""
    with unit_of_work(sessions) as session:
        return check_dataset(session, dataset_id, plan_check)


def check_all(
    sessions: sessionmaker[Session], batch: int = 100, plan_check: PlanCheck | None = None
) -> Iterator[Check]:
    """Every dataset's check, in id order, each in a transaction of its own."""
    after: uuid.UUID | None = None
    while True:
        with unit_of_work(sessions) as session:
            ids = repo.dataset_ids(session, after, batch)
        for dataset_id in ids:
            found = check(sessions, dataset_id, plan_check)
            if found is not None:
                yield found
        if len(ids) < batch:
            return
        after = ids[-1]


def check_pass(
    sessions: sessionmaker[Session],
    after: uuid.UUID | None,
    max_entries: int,
    plan_check: PlanCheck | None = None,
) -> tuple[list[Check], uuid.UUID | None]:
    """A bounded share of the check, for the sweeper: datasets in id order after `after`, until
    `max_entries` entries were replayed (at least one dataset, however long its ledger). Returns
    the checks and where the next pass starts (None: from the first dataset again)."""
    checks: list[Check] = []
    replayed = 0
    while replayed < max_entries:
        with unit_of_work(sessions) as session:
            ids = repo.dataset_ids(session, after, 1)
        if not ids:
            return checks, None
        after = ids[0]
        found = check(sessions, after, plan_check)
        if found is not None:
            checks.append(found)
            replayed += max(found.entries, 1)
    return checks, after
