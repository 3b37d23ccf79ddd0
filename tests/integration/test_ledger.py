"""The budget ledger against a real database: atomic admission under concurrency, replay."""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.jobs import service as jobs_service
from app.kit.db.session import get_engine, session_factory, session_scope
from app.kit.errors import BudgetExceeded, Conflict
from app.ledger import repository as ledger_repo
from app.ledger import service as ledger
from app.ledger import verify
from app.models import Job
from privclust.privacy import budget as bmath
from privclust.privacy import gdp
from tests.support.db import admit, make_dataset

pytestmark = pytest.mark.integration


def _admit_in_threads(db_url: str, dataset_id: uuid.UUID, mu: float, n: int) -> list[bool]:
    """n admissions at once, each on its own thread and its own connection."""
    barrier = threading.Barrier(n)
    factory = session_factory(db_url)

    def one(_: int) -> bool:
        session = factory()
        try:
            barrier.wait()
            return admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=mu)) is not None
        finally:
            session.close()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _replayed_total(db_url: str, dataset_id: uuid.UUID) -> tuple[float, float, int]:
    """What the ledger replays to (and the check that the running budget says the same)."""
    check = verify.check(session_factory(db_url), dataset_id)
    assert check is not None and check.agrees, check
    with session_scope(db_url) as s:
        state = ledger.state_of(s, dataset_id)
        used = math.sqrt(bmath.used_mu_squared(state.live_mus))
        jobs = s.query(Job).filter(Job.dataset_id == dataset_id).count()
        return used, state.mu_cap, jobs


def test_64_concurrent_admissions_admit_exactly_the_10_that_fit(db_url: str) -> None:
    mu_cap = 1.0
    dataset_id = make_dataset(db_url, mu_cap=mu_cap)
    get_engine(db_url).pool.dispose()
    results = _admit_in_threads(db_url, dataset_id, mu_cap / math.sqrt(10), 64)
    assert sum(results) == 10
    used, cap, jobs = _replayed_total(db_url, dataset_id)
    assert jobs == 10
    assert used <= cap * (1 + 1e-12)


def _process_main(db_url: str, dataset_id: str, mu: float, n: int, out: mp.Queue) -> None:
    out.put(sum(_admit_in_threads(db_url, uuid.UUID(dataset_id), mu, n)))


def test_two_processes_competing_for_one_budget(db_url: str) -> None:
    dataset_id = make_dataset(db_url, mu_cap=2.0)
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=_process_main, args=(db_url, str(dataset_id), 2.0 / math.sqrt(10), 32, out)
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    admitted = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sum(admitted) == 10
    used, cap, jobs = _replayed_total(db_url, dataset_id)
    assert jobs == 10 and used <= cap * (1 + 1e-12)


def test_100_jobs_of_a_tenth_of_the_cap_fit_and_the_101st_is_refused(session, db_url) -> None:
    cap = bmath.cap_from_epsilon_delta(1.0, 1e-5)
    dataset_id = make_dataset(db_url, mu_cap=cap)
    for i in range(100):
        assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=cap / 10)), i
    assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=cap / 10)) is None


def test_the_last_of_the_budget_can_be_spent_exactly(session, db_url) -> None:
    cap = bmath.cap_from_epsilon_delta(2.0, 1e-6)
    dataset_id = make_dataset(db_url, mu_cap=cap, epsilon=2.0, delta=1e-6)
    assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=cap * 0.6))
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    before = ledger.budget(session, ds)
    # Spend exactly the epsilon that the budget endpoint reports as remaining.
    assert admit(
        session, dataset_id, jobs_service.JobRequest(k=2, epsilon=before.epsilon_remaining)
    )
    after = ledger.budget(session, ds)
    assert after.mu_remaining == 0.0 and after.epsilon_remaining == 0.0
    # The smallest job the planner accepts (pe-means: counts only) still overshoots.
    tiny = jobs_service.JobRequest(algorithm="pe-means", k=2, mu=1e-9)
    assert admit(session, dataset_id, tiny) is None


def test_overshoot_is_a_409_with_the_numbers_and_charges_nothing(session, db_url) -> None:
    dataset_id = make_dataset(db_url, mu_cap=1.0)
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    ledger.begin_budget_transaction(session)
    with pytest.raises(BudgetExceeded) as err:
        jobs_service.submit(
            session, ds, jobs_service.JobRequest(k=2, mu=1.5), actor=None, idempotency_key=None
        )
    session.rollback()
    assert err.value.code == "budget-exceeded"
    assert err.value.extra["mu_requested"] == 1.5
    assert err.value.extra["mu_cap"] == 1.0
    assert err.value.extra["mu_remaining"] == pytest.approx(1.0)
    assert err.value.extra["epsilon_remaining"] > 0
    assert ledger.budget(session, ds).jobs == 0


def test_idempotency_key_charges_once_and_refuses_a_different_body(session, db_url) -> None:
    dataset_id = make_dataset(db_url, mu_cap=1.0)
    req = jobs_service.JobRequest(k=2, mu=0.5)
    first = admit(session, dataset_id, req, idempotency_key="retry-1")
    again = admit(session, dataset_id, req, idempotency_key="retry-1")
    assert first is not None and again is not None
    assert first[0] == again[0] and first[1] and not again[1]
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    assert ledger.budget(session, ds).mu_reserved == pytest.approx(0.5)
    with pytest.raises(Conflict) as err:
        admit(session, dataset_id, jobs_service.JobRequest(k=3, mu=0.5), idempotency_key="retry-1")
    session.rollback()
    assert err.value.code == "idempotency-key-reused"


def test_refund_only_before_commit_and_the_ledger_is_append_only(session, db_url) -> None:
    dataset_id = make_dataset(db_url, mu_cap=1.0)
    job_id, _ = admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=0.6))
    job = session.get(Job, job_id)
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    ledger.commit(session, job)
    session.commit()
    assert ledger.budget(session, ds).mu_spent == pytest.approx(0.6)
    with pytest.raises(RuntimeError, match="refund"):
        ledger.refund(session, job, note="should not happen")
    session.rollback()
    entry = ledger_repo.ledger_entries(session, dataset_id)[-1]
    entry.note = "tampered"
    with pytest.raises(RuntimeError, match="append-only"):
        session.flush()
    session.rollback()


def test_cancel_of_a_queued_job_refunds_it(session, db_url) -> None:
    dataset_id = make_dataset(db_url, mu_cap=1.0)
    job_id, _ = admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=0.8))
    job = session.get(Job, job_id)
    jobs_service.cancel(session, job, None)
    session.commit()
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    view = ledger.budget(session, ds)
    assert job.status == "cancelled"
    assert view.mu_reserved == 0.0 and view.mu_remaining == pytest.approx(1.0, rel=1e-6)


def test_cap_can_be_raised_but_never_below_what_is_spent(session, db_url) -> None:
    cap = bmath.cap_from_epsilon_delta(1.0, 1e-6)
    dataset_id = make_dataset(db_url, mu_cap=cap, epsilon=1.0, delta=1e-6)
    assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=cap * 0.9))
    ledger.begin_budget_transaction(session)
    from app.kit.errors import InvalidParameter

    with pytest.raises(InvalidParameter):
        ledger.change_cap(session, dataset_id, 0.1, 1e-6, None)
    session.rollback()
    ledger.begin_budget_transaction(session)
    ledger.change_cap(session, dataset_id, 4.0, 1e-6, None)
    session.commit()
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    view = ledger.budget(session, ds)
    assert view.mu_cap == pytest.approx(gdp.mu_from_epsilon_delta(4.0, 1e-6), rel=1e-8)
    kinds = [e.kind for e in ledger_repo.ledger_entries(session, dataset_id)]
    assert kinds == ["cap", "reserve", "cap"]


def test_the_row_count_is_spent_first_and_the_cap_cannot_go_below_it(session, db_url) -> None:
    cap = bmath.cap_from_epsilon_delta(1.0, 1e-6)
    count_mu = 0.6 * cap
    dataset_id = make_dataset(
        db_url, mu_cap=cap, epsilon=1.0, delta=1e-6, count_mu=count_mu, n_rows_dp=990
    )
    ds = ledger_repo.dataset_for_tenant(session, dataset_id, "acme")
    view = ledger.budget(session, ds)
    assert view.mu_spent == pytest.approx(count_mu) and view.jobs == 0
    assert view.mu_remaining == pytest.approx(0.8 * cap)
    # The rest of the budget is what jobs can have: 0.8 of the cap fits, a hair more does not.
    assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=0.81 * cap)) is None
    assert admit(session, dataset_id, jobs_service.JobRequest(k=2, mu=0.79 * cap))
    ledger.begin_budget_transaction(session)
    from app.kit.errors import InvalidParameter

    with pytest.raises(InvalidParameter) as err:
        ledger.change_cap(session, dataset_id, 0.1, 1e-6, None)
    session.rollback()
    assert err.value.extra["mu_used"] == pytest.approx(math.hypot(count_mu, 0.79 * cap))
    entries = ledger_repo.ledger_entries(session, dataset_id)
    assert [e.kind for e in entries] == ["cap", "count", "reserve"]
    assert (entries[1].mu, entries[1].sigma, entries[1].releases) == (
        count_mu,
        gdp.noise_multiplier(count_mu, 1),  # 1/mu rounded up, as the count was drawn
        1,
    )


def test_the_budget_lock_is_taken_once_a_transaction_and_again_in_the_next(db_url: str) -> None:
    from sqlalchemy import event

    dataset_id = make_dataset(db_url, mu_cap=1.0)
    engine = get_engine(db_url)
    locks: list[str] = []

    def count(conn: object, cursor: object, statement: str, *rest: object) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM datasets" in statement:
            locks.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_factory(db_url)() as s:
            ledger.begin_budget_transaction(s)
            first = ledger.lock_for_admission(s, dataset_id)
            assert ledger.lock_for_admission(s, dataset_id) is first  # held: no second query
            assert len(locks) == 1
            s.commit()
            ledger.lock_for_admission(s, dataset_id)  # a new transaction locks again
            assert len(locks) == 2
            s.rollback()
            ledger.begin_budget_transaction(s)
            ledger.lock_for_admission(s, dataset_id)
            assert len(locks) == 3
            s.rollback()
    finally:
        event.remove(engine, "before_cursor_execute", count)
