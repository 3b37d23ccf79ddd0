"""Every limit a charge must fit, checked and moved together under the budget locks.

A job (or each job of a sweep) must fit the dataset's lifetime cap, the dataset's pace, and,
when its API key has a cap on the dataset, that cap and its pace. The checks read the running
budgets (constant time) and refuse with a problem that names the limit and what is left of it;
nothing is charged unless every limit admits the job, and then all of them move in the same
transaction as the job's `reserve` entry.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from app.kit import repository as kit_repo
from app.kit.errors import BudgetExceeded, KeyBudgetExceeded, PaceExceeded
from app.ledger import repository as repo
from app.ledger.pace import Pace, write_pace
from app.ledger.state import RunningBudget
from app.models import Dataset, DatasetBudget, KeyBudget
from privclust.privacy import budget as bmath


@dataclass(frozen=True)
class Limits:
    """The running budgets a charge by `key_id` on `dataset` must fit, as of `now`."""

    dataset: Dataset
    row: DatasetBudget
    key_row: KeyBudget | None
    now: datetime
    key_id: uuid.UUID | None = None
    running: RunningBudget = field(init=False)
    pace: Pace | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "running", RunningBudget.of_row(self.row))
        pace = Pace.of_row(self.row)
        object.__setattr__(self, "pace", None if pace is None else pace.at(self.now))

    @property
    def key_running(self) -> RunningBudget | None:
        return None if self.key_row is None else RunningBudget.of_row(self.key_row)

    @property
    def key_pace(self) -> Pace | None:
        pace = None if self.key_row is None else Pace.of_row(self.key_row)
        return None if pace is None else pace.at(self.now)

    @property
    def key_delta(self) -> float:
        """The delta at which the key's cap is read as epsilon (the dataset's, unless the owner
        gave the key's cap in (epsilon, delta))."""
        delta = None if self.key_row is None else self.key_row.delta
        return self.dataset.delta if delta is None else float(delta)


def read(
    session: Session, dataset: Dataset, key_id: uuid.UUID | None, now: datetime, *, lock: bool
) -> Limits:
    """The limits of a charge by `key_id` (None: the dataset's alone). With `lock`, the caller
    holds the dataset's budget lock and is about to charge: the key's running budget is locked
    first, then the dataset's (the order every writer keeps)."""
    key_row = None
    if key_id is not None:
        key_row = repo.key_budget_row(session, dataset.id, key_id, for_update=lock)
    row = repo.budget_row(session, dataset.id, for_update=lock)
    if row is None:
        raise RuntimeError(f"dataset {dataset.id} has no running budget (run `privclust migrate`)")
    return Limits(dataset, row, key_row, now, key_id)


def mu_and_epsilon(mu: float, delta: float) -> str:
    """A budget figure as a refusal states it: mu, and epsilon at `delta` beside it."""
    return f"mu={mu:.6g} (epsilon={bmath.epsilon_remaining(mu, delta):.4g} at delta={delta:.3g})"


def cap_refusal(
    dataset: Dataset, running: RunningBudget, mu: float, needs: str
) -> BudgetExceeded | None:
    """The refusal (409 `budget-exceeded`) when `mu` does not fit what is left of the
    dataset's lifetime cap; None when it fits."""
    if bmath.is_admissible_sq(running.used_sq, mu, running.mu_cap):
        return None
    remaining = bmath.remaining_mu_sq(running.used_sq, running.mu_cap)
    cap = running.mu_cap
    return BudgetExceeded(
        f"{needs} but only {mu_and_epsilon(remaining, dataset.delta)} of the dataset's budget "
        f"(mu_cap={cap:.6g}) remains; nothing was charged",
        cap="dataset",
        mu_requested=mu,
        mu_remaining=remaining,
        epsilon_remaining=bmath.epsilon_remaining(remaining, dataset.delta),
        mu_cap=cap,
    )


def _key_cap_refusal(limits: Limits, mu: float, needs: str) -> BudgetExceeded | None:
    key = limits.key_running
    if key is None or bmath.is_admissible_sq(key.used_sq, mu, key.mu_cap):
        return None
    remaining = bmath.remaining_mu_sq(key.used_sq, key.mu_cap)
    return KeyBudgetExceeded(
        f"{needs} but only {mu_and_epsilon(remaining, limits.key_delta)} of this key's cap on "
        f"the dataset (mu_cap={key.mu_cap:.6g}) remains; nothing was charged",
        cap="key",
        key_id=str(limits.key_id),
        mu_requested=mu,
        mu_remaining=remaining,
        epsilon_remaining=bmath.epsilon_remaining(remaining, limits.key_delta),
        delta=limits.key_delta,
        mu_cap=key.mu_cap,
    )


def _lifetime_left(limits: Limits, scope: str) -> float:
    """What the lifetime caps that bind `scope` leave now: the dataset's, and the key's too."""
    left = bmath.remaining_mu_sq(limits.running.used_sq, limits.running.mu_cap)
    key = limits.key_running
    if scope == "key" and key is not None:
        left = min(left, bmath.remaining_mu_sq(key.used_sq, key.mu_cap))
    return left


def _pace_refusal(
    limits: Limits, pace: Pace | None, scope: str, mu: float, needs: str
) -> BudgetExceeded | None:
    if pace is None or pace.admits(mu):
        return None
    whose = "the dataset's" if scope == "dataset" else "this key's"
    renews = pace.renews_at()
    allows = min(pace.mu, _lifetime_left(limits, scope))
    delta = limits.dataset.delta if scope == "dataset" else limits.key_delta
    return PaceExceeded(
        f"{needs} but only {mu_and_epsilon(pace.remaining, delta)} of {whose} pace "
        f"(mu={pace.mu:.6g} a {pace.period}) remains this {pace.period}; it renews at "
        f"{renews.isoformat()} and will then allow {mu_and_epsilon(allows, delta)}, within the "
        "lifetime cap; nothing was charged",
        cap=f"{scope}-pace",
        key_id=None if scope == "dataset" else str(limits.key_id),
        period=pace.period.value,
        pace_mu=pace.mu,
        mu_requested=mu,
        mu_remaining=pace.remaining,
        epsilon_remaining=bmath.epsilon_remaining(pace.remaining, delta),
        renews_at=renews.isoformat(),
        mu_at_renewal=allows,
        epsilon_at_renewal=bmath.epsilon_remaining(allows, delta),
    )


def refusal(limits: Limits, mu: float, needs: str) -> BudgetExceeded | None:
    """The first limit `mu` does not fit (the dataset's cap, the key's cap, then the paces),
    as the problem to raise; None when every limit admits it. `needs` says what needs it
    ("this job needs mu=0.5")."""
    return (
        cap_refusal(limits.dataset, limits.running, mu, needs)
        or _key_cap_refusal(limits, mu, needs)
        or _pace_refusal(limits, limits.pace, "dataset", mu, needs)
        or _pace_refusal(limits, limits.key_pace, "key", mu, needs)
    )


def refuse(
    session: Session,
    dataset: Dataset,
    key_id: uuid.UUID | None,
    mu: float,
    needs: str,
    now: datetime,
) -> None:
    """Raise the `refusal` of `mu` by `key_id` (nothing charged), if any, under the budget
    lock the caller holds."""
    refused = refusal(read(session, dataset, key_id, now, lock=True), mu, needs)
    if refused is not None:
        raise refused


def charge(limits: Limits, mu: float) -> None:
    """Reserve `mu` in every limit (the caller checked `refusal` under the same locks)."""
    now = kit_repo.now()
    limits.running.reserved(mu).write_to(limits.row)
    if limits.pace is not None:
        write_pace(limits.row, limits.pace.charged(mu))
    limits.row.updated_at = now
    if limits.key_row is not None:
        key_running = limits.key_running
        assert key_running is not None
        key_running.reserved(mu).write_to(limits.key_row)
        key_pace = limits.key_pace
        if key_pace is not None:
            write_pace(limits.key_row, key_pace.charged(mu))
        limits.key_row.updated_at = now


def move_key(
    session: Session, dataset_id: uuid.UUID, key_id: uuid.UUID | None, moved: str, mu: float
) -> None:
    """A job's `commit` or `refund` moves its key's running budget too, when the key has a cap
    on the dataset (`moved`: "committed" or "refunded"). Locked before the dataset's row."""
    if key_id is None:
        return
    row = repo.key_budget_row(session, dataset_id, key_id, for_update=True)
    if row is None:
        return
    running = RunningBudget.of_row(row)
    (running.committed(mu) if moved == "committed" else running.refunded(mu)).write_to(row)
    row.updated_at = kit_repo.now()
