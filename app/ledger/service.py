"""The per-dataset privacy budget ledger: admission, commit, refund and cap changes.

The ledger is append-only. A dataset's budget state is never stored as a running total: it is
the replay of its entries, so it can always be recomputed and audited. Jobs, and the noisy row
count released at upload, spend mu (Gaussian DP); the dataset's delta is fixed by its cap, and
releases compose as sqrt(sum mu_i^2).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from app.kit import repository as kit_repo
from app.kit.db.session import IMMEDIATE
from app.kit.errors import BudgetExceeded, Conflict, InvalidParameter, NotFound
from app.ledger import repository as repo
from app.models import Dataset, Job, LedgerEntry, LedgerKind
from privclust.privacy import budget as bmath
from privclust.privacy.gdp import PrivacyParameterError, noise_multiplier


def begin_budget_transaction(session: Session) -> None:
    """End the session's read transaction and open one that can take the budget lock.

    Every budget change (admit, cancel, cap change) must start its transaction this way: on
    SQLite the BEGIN itself takes the write lock (BEGIN IMMEDIATE); on Postgres the change then
    takes the dataset row with SELECT ... FOR UPDATE (`repo.lock_dataset`).
    """
    session.commit()
    session.connection(execution_options=IMMEDIATE)


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


def replay(entries: Iterable[LedgerEntry]) -> LedgerState:
    """Fold the entries, in order, into the budget state."""
    state = LedgerState(mu_cap=0.0)
    for entry in entries:
        if entry.kind == LedgerKind.CAP and entry.mu is not None:
            state.mu_cap = float(entry.mu)
        elif entry.kind == LedgerKind.COUNT and entry.mu is not None:
            state.dataset_releases.append(float(entry.mu))
        elif entry.job_id is None:
            continue
        elif entry.kind == LedgerKind.RESERVE and entry.mu is not None:
            state.reserved[entry.job_id] = float(entry.mu)
            state.jobs += 1
        elif entry.kind == LedgerKind.COMMIT:
            if entry.job_id in state.reserved:
                state.spent[entry.job_id] = state.reserved.pop(entry.job_id)
        elif entry.kind == LedgerKind.REFUND:
            state.reserved.pop(entry.job_id, None)
    return state


@dataclass(frozen=True)
class BudgetView:
    epsilon: float
    delta: float
    mu_cap: float
    mu_spent: float
    mu_reserved: float
    mu_remaining: float
    epsilon_remaining: float
    jobs: int


def view(dataset: Dataset, state: LedgerState) -> BudgetView:
    return _view(dataset.epsilon, dataset.delta, state)


def representable_view(
    epsilon: float, delta: float, state: LedgerState, field: str = "epsilon"
) -> BudgetView:
    """The budget a change would leave, computed before anything is written.

    Raises InvalidParameter naming `field` when the budget arithmetic cannot represent it
    (a number beyond the float range, or one that could not be shown as JSON), so a request
    that would store an unreadable budget changes nothing instead.
    """
    try:
        result = _view(epsilon, delta, state)
    except (PrivacyParameterError, ArithmeticError) as exc:
        raise InvalidParameter(f"this budget cannot be represented: {exc}", field=field) from exc
    if not all(math.isfinite(float(v)) for v in result.__dict__.values()):
        raise InvalidParameter("this budget cannot be represented as finite numbers", field=field)
    return result


def _view(epsilon: float, delta: float, state: LedgerState) -> BudgetView:
    b = bmath.budget_state(state.spent_mus, state.reserved.values(), state.mu_cap, delta)
    return BudgetView(
        epsilon=epsilon,
        delta=delta,
        mu_cap=b.mu_cap,
        mu_spent=b.mu_spent,
        mu_reserved=b.mu_reserved,
        mu_remaining=b.mu_remaining,
        epsilon_remaining=b.epsilon_remaining,
        jobs=state.jobs,
    )


def state_of(session: Session, dataset_id: uuid.UUID) -> LedgerState:
    return replay(repo.ledger_entries(session, dataset_id))


def budget(session: Session, dataset: Dataset) -> BudgetView:
    return view(dataset, state_of(session, dataset.id))


def open_dataset_budget(session: Session, dataset: Dataset, actor: uuid.UUID | None) -> None:
    """First entries of a new dataset's ledger: its cap, then (unless the owner declared the
    row count public) the cost of the noisy row count released at upload."""
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=dataset.id,
            kind=LedgerKind.CAP,
            actor_key_id=actor,
            mu=dataset.mu_cap,
            epsilon=dataset.epsilon,
            delta=dataset.delta,
            note="initial budget",
        ),
    )
    if dataset.count_mu is not None:
        kit_repo.add(
            session,
            LedgerEntry(
                dataset_id=dataset.id,
                kind=LedgerKind.COUNT,
                actor_key_id=actor,
                mu=dataset.count_mu,
                sigma=noise_multiplier(dataset.count_mu, 1),  # as release_count draws it
                releases=1,
                note="noisy row count released at upload",
            ),
        )


def lock_for_admission(session: Session, dataset_id: uuid.UUID) -> Dataset:
    """Take the dataset's budget lock (held until commit) for admitting a job on it.

    Raises NotFound, or Conflict when its rows were deleted. Taking it twice in one
    transaction is harmless.
    """
    dataset = repo.lock_dataset(session, dataset_id)
    if dataset is None:
        raise NotFound("no such dataset")
    if dataset.deleted_at is not None:
        raise Conflict(
            "the dataset's rows were deleted; no new jobs can run on it", code="dataset-deleted"
        )
    return dataset


def reserve(session: Session, dataset_id: uuid.UUID, job: Job, actor: uuid.UUID | None) -> Job:
    """Admit `job` against the dataset's budget, or raise BudgetExceeded with nothing charged.

    The caller must have opened this transaction with `begin_budget_transaction`: this
    function takes the lock (FOR UPDATE / BEGIN IMMEDIATE), replays the ledger, and inserts the
    job and its reserve entry. The caller commits, and only then enqueues.
    """
    dataset = lock_for_admission(session, dataset_id)
    state = state_of(session, dataset_id)
    if not bmath.is_admissible(state.live_mus, job.mu, state.mu_cap):
        remaining = bmath.remaining_mu(state.live_mus, state.mu_cap)
        raise BudgetExceeded(
            f"this job needs mu={job.mu:.6g} but only mu={remaining:.6g} of the dataset's "
            f"budget (mu_cap={state.mu_cap:.6g}) remains",
            mu_requested=job.mu,
            mu_remaining=remaining,
            epsilon_remaining=bmath.epsilon_remaining(remaining, dataset.delta),
            mu_cap=state.mu_cap,
        )
    kit_repo.add(session, job)
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=dataset_id,
            kind=LedgerKind.RESERVE,
            job_id=job.id,
            sweep_id=job.sweep_id,
            actor_key_id=actor,
            mu=job.mu,
            sigma=job.sigma,
            releases=job.releases,
            epsilon=job.epsilon,
            delta=job.delta,
            note=_charge_note(job),
        ),
    )
    return job


def _charge_note(job: Job) -> str | None:
    """What a job's charge pays for beyond its centres' releases (sigma and releases)."""
    parts = []
    if job.summary_mu is not None:
        parts.append(f"includes private summaries (sizes and loss) with mu={job.summary_mu:.6g}")
    if job.sweep_id is not None:
        parts.append(f"k={job.k} of sweep {job.sweep_id}")
    return "; ".join(parts) or None


def commit(session: Session, job: Job) -> None:
    """The worker is about to draw the first noise: from here on the spend is final."""
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=job.dataset_id,
            kind=LedgerKind.COMMIT,
            job_id=job.id,
            sweep_id=job.sweep_id,
            mu=job.mu,
            sigma=job.sigma,
            releases=job.releases,
        ),
    )


def refund(session: Session, job: Job, note: str, actor: uuid.UUID | None = None) -> None:
    """Give a reservation back. Only for jobs that never reached `commit` (no noise drawn)."""
    entries = repo.all_ledger_entries_for_job(session, job.id)
    kinds = {e.kind for e in entries}
    if LedgerKind.COMMIT in kinds:
        raise RuntimeError("refusing to refund a job whose noise may have been drawn")
    if LedgerKind.REFUND in kinds or "reserve" not in kinds:
        return
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=job.dataset_id,
            kind=LedgerKind.REFUND,
            job_id=job.id,
            sweep_id=job.sweep_id,
            actor_key_id=actor,
            mu=job.mu,
            note=note,
        ),
    )


def record(
    session: Session,
    job: Job,
    kind: LedgerKind | str,
    note: str | None = None,
    actor: uuid.UUID | None = None,
) -> None:
    """An audit-only entry (succeeded, failed, cancelled): it never changes the budget."""
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=job.dataset_id,
            kind=kind,
            job_id=job.id,
            sweep_id=job.sweep_id,
            actor_key_id=actor,
            note=note,
        ),
    )


def check_cap(epsilon: float, delta: float) -> float:
    """Validate a dataset's (epsilon, delta) cap and return mu_cap (errors name the field)."""
    try:
        return bmath.cap_from_epsilon_delta(epsilon, delta)
    except PrivacyParameterError as exc:
        raise InvalidParameter(str(exc), field=exc.field or "epsilon") from exc


def update_cap(
    session: Session,
    dataset: Dataset,
    epsilon: float,
    delta: float | None,
    actor: uuid.UUID | None,
) -> BudgetView:
    """The owner's cap change as one transaction: validated (delta defaults to the dataset's),
    then written under the budget lock, audited in the ledger, and committed."""
    delta = dataset.delta if delta is None else delta
    check_cap(epsilon, delta)
    begin_budget_transaction(session)
    changed = change_cap(session, dataset.id, epsilon, delta, actor)
    result = budget(session, changed)
    session.commit()
    return result


def entries_and_budget(
    session: Session, dataset: Dataset
) -> tuple[Sequence[LedgerEntry], BudgetView]:
    """The dataset's ledger entries, oldest first, and the budget they replay to."""
    entries = repo.ledger_entries(session, dataset.id)
    return entries, view(dataset, replay(entries))


def change_cap(
    session: Session, dataset_id: uuid.UUID, epsilon: float, delta: float, actor: uuid.UUID | None
) -> Dataset:
    """Set a new (epsilon, delta) cap; it may never fall below what is spent or reserved.

    Everything is checked before the cap is written: a cap the budget arithmetic cannot
    represent is refused (422 naming `epsilon`) and changes nothing.
    """
    mu_cap = check_cap(epsilon, delta)
    dataset = repo.lock_dataset(session, dataset_id)
    if dataset is None:
        raise NotFound("no such dataset")
    state = state_of(session, dataset_id)
    capped = state.copy()
    capped.mu_cap = mu_cap
    representable_view(epsilon, delta, capped)
    used = math.sqrt(bmath.used_mu_squared(state.live_mus))
    if mu_cap < used:
        raise InvalidParameter(
            f"the new cap (mu={mu_cap:.6g}) is below what is already spent or reserved "
            f"(mu={used:.6g})",
            field="epsilon",
            mu_cap_requested=mu_cap,
            mu_used=used,
        )
    dataset.epsilon, dataset.delta, dataset.mu_cap = epsilon, delta, mu_cap
    kit_repo.add(
        session,
        LedgerEntry(
            dataset_id=dataset_id,
            kind=LedgerKind.CAP,
            actor_key_id=actor,
            mu=mu_cap,
            epsilon=epsilon,
            delta=delta,
            note="cap changed by owner",
        ),
    )
    session.flush()
    return dataset
