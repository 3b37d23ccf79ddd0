"""The per-dataset privacy budget ledger: admission, commit, refund and cap changes.

The ledger is append-only and hash-chained (app.ledger.chain): the audit trail. Reads and
admissions use the dataset's running budget (app.ledger.state.RunningBudget), which the
functions here move, with the chain's head, in the same transaction as each entry they append
(app.ledger.entries.append), and only they append entries. `privclust ledger verify`
(app.ledger.verify) replays, follows the chain and compares.
Jobs, and the noisy row count released at upload, spend mu (Gaussian DP); the dataset's delta
is fixed by its cap, and releases compose as sqrt(sum mu_i^2).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from app.kit import repository as kit_repo
from app.kit.clock import SYSTEM_CLOCK
from app.kit.db.session import IMMEDIATE
from app.kit.errors import Conflict, InvalidParameter, NotFound
from app.ledger import limits
from app.ledger import repository as repo
from app.ledger.entries import append, dataset_entry, job_entry
from app.ledger.repository import EntryFilter
from app.ledger.state import BudgetView, LedgerState, RunningBudget, budget_view, new_row, replay
from app.models import Dataset, DatasetBudget, Job, LedgerEntry, LedgerKind
from privclust.privacy import budget as bmath
from privclust.privacy.cost import release_cost
from privclust.privacy.gdp import PrivacyParameterError, compose_squares, noise_multiplier

LEDGER_PAGE_DEFAULT = 100
LEDGER_PAGE_MAX = 1000


def begin_budget_transaction(session: Session) -> None:
    """End the session's read transaction and open one that can take the budget lock.

    Every budget change (admit, cancel, cap change) must start its transaction this way: on
    SQLite the BEGIN itself takes the write lock (BEGIN IMMEDIATE); on Postgres the change then
    takes the dataset row with SELECT ... FOR UPDATE (`repo.lock_dataset`).
    """
    session.commit()
    session.connection(execution_options=IMMEDIATE)


def _running_of(state: LedgerState | RunningBudget) -> RunningBudget:
    return state if isinstance(state, RunningBudget) else RunningBudget.of_state(state)


def view(dataset: Dataset, state: LedgerState | RunningBudget) -> BudgetView:
    return budget_view(dataset.epsilon, dataset.delta, _running_of(state))


def representable_view(
    epsilon: float, delta: float, state: LedgerState | RunningBudget, field: str = "epsilon"
) -> BudgetView:
    """The budget a change would leave, computed before anything is written.

    Raises InvalidParameter naming `field` when the budget arithmetic cannot represent it
    (a number beyond the float range, or one that could not be shown as JSON), so a request
    that would store an unreadable budget changes nothing instead.
    """
    try:
        result = budget_view(epsilon, delta, _running_of(state))
    except (PrivacyParameterError, ArithmeticError) as exc:
        raise InvalidParameter(f"this budget cannot be represented: {exc}", field=field) from exc
    if not all(math.isfinite(float(v)) for v in result.__dict__.values()):
        raise InvalidParameter("this budget cannot be represented as finite numbers", field=field)
    return result


def state_of(session: Session, dataset_id: uuid.UUID) -> LedgerState:
    """The replay of the dataset's whole ledger: for audits (`verify`) and tests, never for
    answering a request."""
    return replay(repo.ledger_entries(session, dataset_id))


def running(session: Session, dataset_id: uuid.UUID) -> RunningBudget:
    """The dataset's running budget, in one query."""
    row = repo.budget_row(session, dataset_id)
    if row is None:
        raise RuntimeError(f"dataset {dataset_id} has no running budget (run `privclust migrate`)")
    return RunningBudget.of_row(row)


def tenant_dataset(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset:
    """The tenant's dataset whose budget the ledger keeps (deleted ones included), or NotFound."""
    dataset = repo.dataset_for_tenant(session, dataset_id, tenant)
    if dataset is None:
        raise NotFound("no such dataset", code="dataset-not-found")
    return dataset


def budget(session: Session, dataset: Dataset) -> BudgetView:
    return view(dataset, running(session, dataset.id))


def budgets(session: Session, datasets: Sequence[Dataset]) -> dict[uuid.UUID, BudgetView]:
    """The budgets of a page of datasets, in one query."""
    rows = repo.budget_rows(session, [d.id for d in datasets])
    missing = [d.id for d in datasets if d.id not in rows]
    if missing:
        raise RuntimeError(f"datasets without a running budget: {missing}")
    return {d.id: view(d, RunningBudget.of_row(rows[d.id])) for d in datasets}


def _locked_budget(session: Session, dataset_id: uuid.UUID) -> DatasetBudget:
    """The running budget's row, locked until commit (the last lock every writer takes)."""
    row = repo.budget_row(session, dataset_id, for_update=True)
    if row is None:
        raise RuntimeError(f"dataset {dataset_id} has no running budget (run `privclust migrate`)")
    return row


def open_dataset_budget(
    session: Session, dataset: Dataset, actor: uuid.UUID | None, *, with_count: bool = True
) -> None:
    """First entries of a new dataset's ledger: its cap, then (unless the owner declared the
    row count public, or `with_count` is False: an import charges its count once it has read
    the rows, `charge_count`) the cost of the noisy row count released at upload; and its
    running budget, which starts from them."""
    row = new_row(dataset.id, RunningBudget(mu_cap=0.0))
    kit_repo.add(session, row)
    opened = RunningBudget(mu_cap=dataset.mu_cap)
    cap = {"mu": dataset.mu_cap, "epsilon": dataset.epsilon, "delta": dataset.delta}
    entry = dataset_entry(dataset.id, LedgerKind.CAP, actor, "initial budget", **cap)
    append(session, row, entry, opened)
    if dataset.count_mu is not None and with_count:
        entry = _count_entry(dataset, actor, "noisy row count released at upload")
        append(session, row, entry, opened.released(dataset.count_mu))


def _count_entry(dataset: Dataset, actor: uuid.UUID | None, note: str) -> LedgerEntry:
    """The `count` entry: the cost of one release, as release_count draws it."""
    assert dataset.count_mu is not None
    mu, sigma = dataset.count_mu, noise_multiplier(dataset.count_mu, 1)
    return dataset_entry(dataset.id, LedgerKind.COUNT, actor, note, mu=mu, sigma=sigma, releases=1)


def charge_count(session: Session, dataset: Dataset, actor: uuid.UUID | None) -> None:
    """Charge an imported dataset's noisy row count (its `count` entry), before the count is
    drawn; BudgetExceeded (nothing charged) if the cap was lowered below it meanwhile.

    The caller opened the transaction with `begin_budget_transaction` and holds the dataset's
    lock (`lock_for_admission`), and commits before drawing the noise."""
    assert dataset.count_mu is not None
    row = _locked_budget(session, dataset.id)
    current = RunningBudget.of_row(row)
    mu = dataset.count_mu
    refuse_unless_admissible(dataset, current, mu, f"the noisy row count needs mu={mu:.6g}")
    entry = _count_entry(dataset, actor, "noisy row count released at import")
    append(session, row, entry, current.released(mu))


# session.info key: (the transaction, {dataset id: its row}) of the budget locks it holds.
_HELD_LOCKS = "privclust.budget_locks"


def lock_for_admission(session: Session, dataset_id: uuid.UUID) -> Dataset:
    """Take the dataset's budget lock (held until commit) for admitting a job on it.

    Raises NotFound, or Conflict when its rows were deleted. Taken again in the same
    transaction (an admission, then each of its jobs' `reserve`), it is still held and the
    row cannot have changed: the row read the first time is returned without another query.
    """
    held = _locks_held(session)
    if dataset_id in held:
        return held[dataset_id]
    dataset = repo.lock_dataset(session, dataset_id)
    if dataset is None:
        raise NotFound("no such dataset")
    if dataset.deleted_at is not None:
        raise Conflict(
            "the dataset's rows were deleted; no new jobs can run on it", code="dataset-deleted"
        )
    _locks_held(session)[dataset_id] = dataset  # the transaction the lock began, if it did
    return dataset


def _locks_held(session: Session) -> dict[uuid.UUID, Dataset]:
    """The datasets whose budget lock this session's current transaction holds: none when
    no transaction is open, and a new transaction starts with none."""
    transaction = session.get_transaction()
    held = session.info.get(_HELD_LOCKS)
    if transaction is None:
        return {}
    if held is None or held[0] is not transaction:
        held = session.info[_HELD_LOCKS] = (transaction, {})
    locks: dict[uuid.UUID, Dataset] = held[1]
    return locks


def refuse_unless_admissible(
    dataset: Dataset, running: RunningBudget, mu: float, needs: str
) -> None:
    """BudgetExceeded (nothing charged) unless `mu` fits in what is left of the dataset's cap."""
    if refused := limits.cap_refusal(dataset, running, mu, needs):
        raise refused


def reserve(
    session: Session,
    dataset_id: uuid.UUID,
    job: Job,
    actor: uuid.UUID | None,
    now: datetime | None = None,
) -> Job:
    """Admit `job` against every limit (app.ledger.limits, as of `now`: the service's clock), or
    raise BudgetExceeded (or the subclass naming the limit) with nothing charged.

    The caller must have opened this transaction with `begin_budget_transaction`: this
    function takes the lock (FOR UPDATE / BEGIN IMMEDIATE), reads the running budgets, and
    inserts the job, its reserve entry and the budgets' moves. The caller commits, then enqueues.
    """
    dataset = lock_for_admission(session, dataset_id)
    held = limits.read(session, dataset, actor, now or SYSTEM_CLOCK.now(), lock=True)
    if refused := limits.refusal(held, job.mu, f"this job needs mu={job.mu:.6g}"):
        raise refused
    kit_repo.add(session, job)
    # Every limit moves first (the dataset's running budget, the key's and the paces); the entry
    # is then chained over the budget as moved.
    limits.charge(held, job.mu)
    entry = job_entry(job, LedgerKind.RESERVE, _charge_note(job), actor, **release_cost(job))
    append(session, held.row, entry)
    return job


def _charge_note(job: Job) -> str | None:
    """What a job's charge pays for beyond its centres' releases (sigma and releases)."""
    parts = []
    if job.summary_mu is not None:
        parts.append(f"includes private summaries (sizes and loss) with mu={job.summary_mu:.6g}")
    if job.sweep_id is not None:
        parts.append(f"k={job.k} of sweep {job.sweep_id}")
    return "; ".join(parts) or None


def _live_reservation(entries: Sequence[LedgerEntry]) -> float | None:
    """The mu a job's entries still hold in reserve, as `replay` folds them: that of its
    reserve entry while neither a commit nor a refund followed it; else None."""
    reserved: float | None = None
    for entry in entries:
        if entry.kind == LedgerKind.RESERVE and entry.mu is not None:
            reserved = float(entry.mu)
        elif entry.kind in (LedgerKind.COMMIT, LedgerKind.REFUND):
            reserved = None
    return reserved


def commit(session: Session, job: Job) -> None:
    """The worker is about to draw the first noise: from here on the spend is final."""
    reserved = _live_reservation(repo.all_ledger_entries_for_job(session, job.id))
    if reserved is not None:  # the key's running budget is locked before the dataset's
        limits.move_key(session, job.dataset_id, job.created_by, "committed", reserved)
    row = _locked_budget(session, job.dataset_id)
    current = RunningBudget.of_row(row)
    entry = job_entry(job, LedgerKind.COMMIT, mu=job.mu, sigma=job.sigma, releases=job.releases)
    append(session, row, entry, None if reserved is None else current.committed(reserved))


def refund(session: Session, job: Job, note: str, actor: uuid.UUID | None = None) -> None:
    """Give a reservation back. Only for jobs that never reached `commit` (no noise drawn)."""
    entries = repo.all_ledger_entries_for_job(session, job.id)
    kinds = {e.kind for e in entries}
    if LedgerKind.COMMIT in kinds:
        raise RuntimeError("refusing to refund a job whose noise may have been drawn")
    reserved = _live_reservation(entries)
    if LedgerKind.REFUND in kinds or reserved is None:
        return
    limits.move_key(session, job.dataset_id, job.created_by, "refunded", reserved)
    row = _locked_budget(session, job.dataset_id)
    entry = job_entry(job, LedgerKind.REFUND, note, actor, mu=job.mu)
    append(session, row, entry, RunningBudget.of_row(row).refunded(reserved))


def record(
    session: Session,
    job: Job,
    kind: LedgerKind | str,
    note: str | None = None,
    actor: uuid.UUID | None = None,
) -> None:
    """An audit-only entry (succeeded, failed, cancelled): it never changes the budget, but it
    is chained like every entry, under the budget's lock (taken last, as every writer does)."""
    if kind not in (LedgerKind.SUCCEEDED, LedgerKind.FAILED, LedgerKind.CANCELLED):
        raise ValueError(f"{kind!r} changes the budget; it is not an audit-only entry")
    append(session, _locked_budget(session, job.dataset_id), job_entry(job, kind, note, actor))


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


def ledger_page(
    session: Session,
    dataset: Dataset,
    limit: int,
    cursor: str | None,
    newest_first: bool = False,
    only: EntryFilter = EntryFilter(),
) -> tuple[Sequence[LedgerEntry], str | None, BudgetView]:
    """A page of the dataset's entries (oldest first, or newest first) after `cursor`, of those
    `only` selects, the next page's cursor (None on the last page) and the budget. The cursor
    is the id of the page's last entry: the ledger only grows at its end."""
    after: int | None = None
    if cursor is not None:
        if not re.fullmatch(r"[0-9]{1,18}", cursor):
            raise InvalidParameter("cursor is not one this API returned", field="cursor")
        after = int(cursor)
    limit = max(1, min(limit, LEDGER_PAGE_MAX))
    entries = repo.ledger_page(session, dataset.id, after, limit + 1, newest_first, only)
    nxt = str(entries[limit - 1].id) if len(entries) > limit else None
    return entries[:limit], nxt, budget(session, dataset)


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
    row = _locked_budget(session, dataset_id)
    current = RunningBudget.of_row(row)
    capped = current.capped(mu_cap)
    representable_view(epsilon, delta, capped)
    if bmath.exact_square(mu_cap) < current.used_sq:
        used = compose_squares(current.used_sq)
        raise InvalidParameter(
            f"the new cap (mu={mu_cap:.6g}) is below what is already spent or reserved "
            f"(mu={used:.6g})",
            field="epsilon",
            mu_cap_requested=mu_cap,
            mu_used=used,
        )
    dataset.epsilon, dataset.delta, dataset.mu_cap = epsilon, delta, mu_cap
    cap = {"mu": mu_cap, "epsilon": epsilon, "delta": delta}
    entry = dataset_entry(dataset_id, LedgerKind.CAP, actor, "cap changed by owner", **cap)
    append(session, row, entry, capped)
    return dataset
