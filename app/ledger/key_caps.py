"""The owner's caps per API key and the paces: set, lift and read them.

A key's cap bounds what the jobs that key admits may spend of one dataset, composed in GDP
like the dataset's budget; keys without one share what the dataset has left. The key's spend
starts from a replay of its ledger entries when the cap is set (what it already spent counts),
and then moves with each of its jobs' entries (app.ledger.limits). A pace (app.ledger.pace) is
a rate limit under a lifetime cap, never a renewal of it.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.kit import repository as kit_repo
from app.kit.errors import InvalidParameter, NotFound
from app.ledger import repository as repo
from app.ledger.limits import Limits
from app.ledger.pace import Pace, PacePeriod, write_pace
from app.ledger.service import (
    begin_budget_transaction,
    budget,
    change_cap,
    check_cap,
    representable_view,
)
from app.ledger.state import BudgetView, KeyReplay, RunningBudget
from app.models import Dataset, KeyBudget, Role
from privclust.privacy import budget as bmath
from privclust.privacy.gdp import PrivacyParameterError, compose_squares, epsilon_from_mu_delta


@dataclass(frozen=True)
class PaceSetting:
    """An owner's pace: at most `mu` per `period`."""

    period: PacePeriod
    mu: float


@dataclass(frozen=True)
class KeyCapSetting:
    """An owner's cap for one key: (epsilon, delta) or mu alone, and an optional pace."""

    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = None
    pace: PaceSetting | None = None


@dataclass(frozen=True)
class PaceView:
    """A pace as of now: its period and mu, what this period has admitted and has left, and
    when the period started and renews."""

    period: str
    mu: float
    mu_used: float
    mu_remaining: float
    period_start: datetime
    renews_at: datetime

    @classmethod
    def of(cls, pace: Pace) -> PaceView:
        assert pace.start is not None
        return cls(
            pace.period.value, pace.mu, pace.used, pace.remaining, pace.start, pace.renews_at()
        )


@dataclass(frozen=True)
class KeyBudgetView:
    """A capped key's budget on a dataset: its cap, spend and what is left, and its pace."""

    key_id: uuid.UUID
    budget: BudgetView
    pace: PaceView | None


def pace_view(row: KeyBudget | object, now: datetime) -> PaceView | None:
    pace = Pace.of_row(row)  # type: ignore[arg-type]
    return None if pace is None else PaceView.of(pace.at(now))


def _view(dataset: Dataset, row: KeyBudget, now: datetime) -> KeyBudgetView:
    delta = dataset.delta if row.delta is None else float(row.delta)
    epsilon = row.epsilon
    if epsilon is None:
        epsilon = _epsilon_of(float(row.mu_cap), delta)
    budget = representable_view(epsilon, delta, RunningBudget.of_row(row), field="mu")
    return KeyBudgetView(row.key_id, budget, pace_view(row, now))


def key_view(held: Limits, running: RunningBudget) -> BudgetView:
    """A capped key's budget (its cap read at its delta) with the spend `running`."""
    assert held.key_row is not None
    epsilon = held.key_row.epsilon
    if epsilon is None:
        epsilon = _epsilon_of(float(held.key_row.mu_cap), held.key_delta)
    return representable_view(epsilon, held.key_delta, running, field="mu")


def _epsilon_of(mu: float, delta: float) -> float:
    """The epsilon a cap in mu means at `delta` (rounded up: a cap never reads smaller)."""
    try:
        return epsilon_from_mu_delta(mu, delta)
    except PrivacyParameterError as exc:
        raise InvalidParameter(f"this cap cannot be shown as epsilon: {exc}", field="mu") from exc


def key_caps(session: Session, dataset: Dataset, now: datetime) -> list[KeyBudgetView]:
    """Every capped key's budget on the dataset, by key id."""
    return [_view(dataset, row, now) for row in repo.key_budget_rows(session, dataset.id)]


def key_cap(session: Session, dataset: Dataset, key_id: uuid.UUID, now: datetime) -> KeyBudgetView:
    row = repo.key_budget_row(session, dataset.id, key_id)
    if row is None:
        raise NotFound("this key has no cap on the dataset", code="key-cap-not-found")
    return _view(dataset, row, now)


def _mu_cap(setting: KeyCapSetting, dataset: Dataset) -> tuple[float | None, float | None, float]:
    """(epsilon, delta, mu_cap) of a key's cap, validated (errors name the field)."""
    if (setting.epsilon is None) == (setting.mu is None):
        raise InvalidParameter("give the cap as epsilon (and delta) or as mu, not both", field="mu")
    if setting.mu is not None:
        if setting.delta is not None:
            raise InvalidParameter("delta goes with epsilon, not with mu", field="delta")
        if not (math.isfinite(setting.mu) and setting.mu > 0):
            raise InvalidParameter("mu must be a finite number > 0", field="mu")
        return None, None, float(setting.mu)
    assert setting.epsilon is not None
    delta = dataset.delta if setting.delta is None else setting.delta
    return setting.epsilon, setting.delta, check_cap(setting.epsilon, delta)


def _checked_pace(pace: PaceSetting | None) -> Pace | None:
    if pace is None:
        return None
    if not (math.isfinite(pace.mu) and pace.mu > 0):
        raise InvalidParameter("a pace's mu must be a finite number > 0", field="pace")
    return Pace(PacePeriod(pace.period), float(pace.mu))


def _kept_pace(old: Pace | None, new: Pace | None, now: datetime) -> Pace | None:
    """The new pace, keeping what this period already admitted when the period is the same."""
    if new is None or old is None or old.period != new.period:
        return None if new is None else new.at(now)
    current = old.at(now)
    return Pace(new.period, new.mu, current.start, current.used_sq)


def _replayed_spend(session: Session, dataset_id: uuid.UUID, key_id: uuid.UUID) -> RunningBudget:
    """What the key's jobs on the dataset spent and hold in reserve, from its ledger entries
    (read once, when a cap is first set)."""
    fold = KeyReplay([key_id])
    for entry in repo.entry_facts(session, dataset_id):
        fold.feed(entry)
    return fold.running(key_id, 0.0)


def set_key_cap(
    session: Session,
    dataset: Dataset,
    key_id: uuid.UUID,
    setting: KeyCapSetting,
    actor: uuid.UUID | None,
    now: datetime,
) -> KeyBudgetView:
    """Set (or change) the key's cap on the dataset, under the budget lock, and commit. It may
    never fall below what the key's jobs already spent or reserved (422)."""
    key = repo.tenant_key(session, key_id, dataset.tenant)
    if key is None or key.role == Role.ADMIN:
        raise NotFound("no such analyst or owner key in this tenant", code="key-not-found")
    epsilon, delta, mu_cap = _mu_cap(setting, dataset)
    pace = _checked_pace(setting.pace)
    begin_budget_transaction(session)
    if repo.lock_dataset(session, dataset.id) is None:
        raise NotFound("no such dataset")
    row = repo.key_budget_row(session, dataset.id, key_id, for_update=True)
    if row is None:
        spend = _replayed_spend(session, dataset.id, key_id)
        row = KeyBudget(dataset_id=dataset.id, key_id=key_id)
        old_pace = None
    else:
        spend, old_pace = RunningBudget.of_row(row), Pace.of_row(row)
    if bmath.exact_square(mu_cap) < spend.used_sq:
        used = compose_squares(spend.used_sq)
        raise InvalidParameter(
            f"the new cap (mu={mu_cap:.6g}) is below what this key already spent or reserved "
            f"on the dataset (mu={used:.6g})",
            field="mu" if setting.mu is not None else "epsilon",
            mu_cap_requested=mu_cap,
            mu_used=used,
        )
    row.epsilon, row.delta, row.updated_by, row.updated_at = epsilon, delta, actor, kit_repo.now()
    spend.capped(mu_cap).write_to(row)
    write_pace(row, _kept_pace(old_pace, pace, now))
    view = _view(dataset, row, now)  # refuses (422) a cap that cannot be shown
    kit_repo.add(session, row)
    session.commit()
    return view


def lift_key_cap(
    session: Session, dataset: Dataset, key_id: uuid.UUID, now: datetime
) -> KeyBudgetView:
    """Remove the key's cap (and its pace): the key shares what the dataset has left again.
    Returns the cap as it was."""
    begin_budget_transaction(session)
    repo.lock_dataset(session, dataset.id)
    row = repo.key_budget_row(session, dataset.id, key_id, for_update=True)
    if row is None:
        raise NotFound("this key has no cap on the dataset", code="key-cap-not-found")
    lifted = _view(dataset, row, now)
    repo.delete_key_budget(session, row)
    session.commit()
    return lifted


def set_dataset_pace(
    session: Session, dataset: Dataset, pace: PaceSetting | None, now: datetime
) -> None:
    """Set, change or (None) remove the dataset's pace, in the caller's budget transaction."""
    new = _checked_pace(pace)
    row = repo.budget_row(session, dataset.id, for_update=True)
    if row is None:
        raise RuntimeError(f"dataset {dataset.id} has no running budget")
    write_pace(row, _kept_pace(Pace.of_row(row), new, now))
    row.updated_at = kit_repo.now()


@dataclass(frozen=True)
class BudgetChange:
    """An owner's change of a dataset's budget: a new cap (epsilon None: unchanged; delta
    None: the dataset's), and, when `change_pace`, a new pace (None: remove it)."""

    epsilon: float | None
    delta: float | None
    change_pace: bool
    pace: PaceSetting | None


def update_budget(
    session: Session, dataset: Dataset, change: BudgetChange, actor: uuid.UUID | None, now: datetime
) -> BudgetView:
    """The owner's cap and pace change as one transaction under the budget lock; committed."""
    delta = dataset.delta if change.delta is None else change.delta
    if change.epsilon is not None:
        check_cap(change.epsilon, delta)
    _checked_pace(change.pace)
    begin_budget_transaction(session)
    changed = repo.lock_dataset(session, dataset.id)
    if changed is None:
        raise NotFound("no such dataset")
    if change.epsilon is not None:
        changed = change_cap(session, dataset.id, change.epsilon, delta, actor)
    if change.change_pace:
        set_dataset_pace(session, changed, change.pace, now)
    result = budget(session, changed)
    session.commit()
    return result


def dataset_pace(session: Session, dataset: Dataset, now: datetime) -> PaceView | None:
    row = repo.budget_row(session, dataset.id)
    return None if row is None else pace_view(row, now)


def as_dict(view: KeyBudgetView) -> dict[str, object]:
    """A key's budget as one flat row (a dashboard table's): its figures, then its pace's."""
    pace = view.pace
    return {
        "key_id": str(view.key_id),
        **asdict(view.budget),
        "pace_period": None if pace is None else pace.period,
        "pace_mu": None if pace is None else pace.mu,
        "pace_mu_used": None if pace is None else pace.mu_used,
        "pace_mu_remaining": None if pace is None else pace.mu_remaining,
        "pace_renews_at": None if pace is None else pace.renews_at.isoformat(),
    }
