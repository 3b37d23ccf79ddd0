"""A dataset's budget as values: the replay of its ledger, the running budget, and the view.

Two ways to the same budget, which must agree exactly:
- `replay` folds the append-only entries into a `LedgerState` (every job's live mu). It reads
  the whole ledger: the audit, and what `privclust ledger verify` compares against.
- `RunningBudget` is that fold kept as it goes (the cap, the exact sums of squares of spent and
  reserved mu, the job count), stored in the dataset's `dataset_budgets` row and moved by the
  ledger service in the same transaction as each entry. Every read uses it in constant time.
Both turn into the same `BudgetView` (privclust.privacy.budget computes the two forms alike).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Protocol

from app.models import DatasetBudget, KeyBudget, LedgerKind
from privclust.privacy import budget as bmath

ZERO = Fraction(0)
GENESIS = "0" * 64  # the chain's start: the `prev_hash` of a dataset's first entry


class EntryFacts(Protocol):
    """What the fold reads of an entry (a LedgerEntry, or a row of those three columns)."""

    kind: str
    job_id: uuid.UUID | None
    mu: float | None


@dataclass
class LedgerState:
    """What the entries say: the current cap, the dataset's own releases (its noisy row count),
    and every job's live mu, split by phase."""

    mu_cap: float
    spent: dict[uuid.UUID, float] = field(default_factory=dict)
    reserved: dict[uuid.UUID, float] = field(default_factory=dict)
    jobs: int = 0
    # mus of releases about the dataset itself (the `count` entry): spent for good.
    dataset_releases: list[float] = field(default_factory=list)

    @property
    def spent_mus(self) -> list[float]:
        return [*self.dataset_releases, *self.spent.values()]

    @property
    def live_mus(self) -> list[float]:
        return [*self.spent_mus, *self.reserved.values()]

    def copy(self) -> LedgerState:
        return LedgerState(
            mu_cap=self.mu_cap,
            spent=dict(self.spent),
            reserved=dict(self.reserved),
            jobs=self.jobs,
            dataset_releases=list(self.dataset_releases),
        )


def replay(entries: Iterable[EntryFacts]) -> LedgerState:
    """Fold the entries, in order, into the budget state."""
    state = LedgerState(mu_cap=0.0)
    for entry in entries:
        _apply(state, entry)
    return state


def _apply(state: LedgerState, entry: EntryFacts) -> None:
    """One entry's move of the budget state."""
    if entry.kind == LedgerKind.CAP and entry.mu is not None:
        state.mu_cap = float(entry.mu)
    elif entry.kind == LedgerKind.COUNT and entry.mu is not None:
        state.dataset_releases.append(float(entry.mu))
    elif entry.job_id is None:
        return
    elif entry.kind == LedgerKind.RESERVE and entry.mu is not None:
        state.reserved[entry.job_id] = float(entry.mu)
        state.jobs += 1
    elif entry.kind == LedgerKind.COMMIT:
        if entry.job_id in state.reserved:
            state.spent[entry.job_id] = state.reserved.pop(entry.job_id)
    elif entry.kind == LedgerKind.REFUND:
        state.reserved.pop(entry.job_id, None)


class KeyEntryFacts(EntryFacts, Protocol):
    actor_key_id: uuid.UUID | None


class KeyReplay:
    """The spend of the jobs each of `keys` admitted (their `reserve` entries name the key),
    folded from the dataset's entries as `replay` folds the dataset's: fed one entry at a time,
    in order, alongside the dataset's replay (app.ledger.verify)."""

    def __init__(self, keys: Iterable[uuid.UUID]) -> None:
        self.states = {key: LedgerState(mu_cap=0.0) for key in keys}
        self._key_of_job: dict[uuid.UUID, uuid.UUID] = {}

    def feed(self, entry: KeyEntryFacts) -> None:
        if entry.job_id is None:
            return
        key = self._key_of_job.get(entry.job_id)
        if entry.kind == LedgerKind.RESERVE and entry.actor_key_id in self.states:
            key = self._key_of_job[entry.job_id] = entry.actor_key_id
        if key is not None:
            _apply(self.states[key], entry)

    def running(self, key: uuid.UUID, mu_cap: float) -> RunningBudget:
        """The key's running budget as the replay gives it, under the cap `mu_cap`."""
        return replace(RunningBudget.of_state(self.states[key]), mu_cap=float(mu_cap))


def _squares(mus: Iterable[float]) -> Fraction:
    return sum((bmath.exact_square(m) for m in mus), ZERO)


@dataclass(frozen=True)
class RunningBudget:
    """The fold of a ledger in constant size: what every budget read and admission uses."""

    mu_cap: float
    spent_sq: Fraction = ZERO  # the dataset's releases and committed jobs
    reserved_sq: Fraction = ZERO  # admitted jobs that have not drawn noise yet
    jobs: int = 0

    @property
    def used_sq(self) -> Fraction:
        return self.spent_sq + self.reserved_sq

    @classmethod
    def of_state(cls, state: LedgerState) -> RunningBudget:
        """The running budget a replay gives (PrivacyParameterError for a mu that is not a
        finite number >= 0: such a value never enters a running sum)."""
        return cls(
            mu_cap=float(state.mu_cap),
            spent_sq=_squares(state.spent_mus),
            reserved_sq=_squares(state.reserved.values()),
            jobs=state.jobs,
        )

    @classmethod
    def of_row(cls, row: DatasetBudget | KeyBudget) -> RunningBudget:
        return cls(
            mu_cap=float(row.mu_cap),
            spent_sq=Fraction(row.spent_sq),
            reserved_sq=Fraction(row.reserved_sq),
            jobs=int(row.jobs),
        )

    def write_to(self, row: DatasetBudget | KeyBudget) -> None:
        row.mu_cap = self.mu_cap
        row.spent_sq = square_text(self.spent_sq)
        row.reserved_sq = square_text(self.reserved_sq)
        row.jobs = self.jobs

    # The moves of the ledger's entries, as `replay` makes them.
    def released(self, mu: float) -> RunningBudget:
        """A release about the dataset itself (`count`): spent for good."""
        return replace(self, spent_sq=self.spent_sq + bmath.exact_square(mu))

    def reserved(self, mu: float) -> RunningBudget:
        """A job admitted (`reserve`)."""
        square = bmath.exact_square(mu)
        return replace(self, reserved_sq=self.reserved_sq + square, jobs=self.jobs + 1)

    def committed(self, mu: float) -> RunningBudget:
        """A reserved job about to draw noise (`commit`): its reservation becomes spent."""
        square = bmath.exact_square(mu)
        return replace(self, spent_sq=self.spent_sq + square, reserved_sq=self.reserved_sq - square)

    def refunded(self, mu: float) -> RunningBudget:
        """A reserved job that never drew noise (`refund`)."""
        return replace(self, reserved_sq=self.reserved_sq - bmath.exact_square(mu))

    def capped(self, mu_cap: float) -> RunningBudget:
        """A new cap (`cap`)."""
        return replace(self, mu_cap=float(mu_cap))


def square_text(square: Fraction) -> str:
    """A sum of squares as the running budget's row stores it: "numerator/denominator"."""
    return f"{square.numerator}/{square.denominator}"


@dataclass
class RunningFold:
    """The running budget entry by entry, moved as the ledger service moves it with each
    entry it appends (what each entry's hash seals: app.ledger.chain)."""

    running: RunningBudget = field(default_factory=lambda: RunningBudget(mu_cap=0.0))
    reserved: dict[uuid.UUID, float] = field(default_factory=dict)

    def step(self, entry: EntryFacts) -> RunningBudget:
        """The running budget after `entry` (PrivacyParameterError for a mu no budget holds)."""
        run, job, mu = self.running, entry.job_id, entry.mu
        if entry.kind == LedgerKind.CAP and mu is not None:
            run = run.capped(mu)
        elif entry.kind == LedgerKind.COUNT and mu is not None:
            run = run.released(mu)
        elif job is None:
            pass
        elif entry.kind == LedgerKind.RESERVE and mu is not None:
            run = run.reserved(mu)
            self.reserved[job] = float(mu)
        elif entry.kind == LedgerKind.COMMIT and job in self.reserved:
            run = run.committed(self.reserved.pop(job))
        elif entry.kind == LedgerKind.REFUND and job in self.reserved:
            run = run.refunded(self.reserved.pop(job))
        self.running = run
        return run


def new_row(dataset_id: uuid.UUID, running: RunningBudget) -> DatasetBudget:
    row = DatasetBudget(dataset_id=dataset_id, last_hash=GENESIS)
    running.write_to(row)
    return row


@dataclass(frozen=True)
class BudgetView(bmath.BudgetState):
    """The budget's figures (mu_cap, spent, reserved, remaining) with the dataset's declared
    (epsilon, delta) and its job count."""

    epsilon: float
    delta: float
    jobs: int


def budget_view(epsilon: float, delta: float, running: RunningBudget) -> BudgetView:
    """The budget as the API shows it (the same floats from a replay or a running budget)."""
    spent, reserved = running.spent_sq, running.reserved_sq
    figures = bmath.budget_state_from_squares(spent, reserved, running.mu_cap, delta)
    return BudgetView(**asdict(figures), epsilon=epsilon, delta=delta, jobs=running.jobs)
