"""The running budget against a replay of the ledger: random sequences of admissions, worker
starts, cancels (refunds), failures after the charge and cap changes, on the real database
(SQLite, or PostgreSQL when PRIVCLUST_TEST_DATABASE_URL is set), compared exactly after every
step; and `privclust ledger verify`, which makes that comparison for an operator."""

from __future__ import annotations

import contextlib
import math
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from privclust.privacy import budget as bmath
from sqlalchemy import text

from app.jobs import service as jobs_service
from app.kit.db.session import session_factory, session_scope
from app.kit.errors import BudgetExceeded, Conflict, InvalidParameter
from app.ledger import service as ledger
from app.ledger import verify
from app.ledger.state import RunningBudget
from app.models import Dataset, Job, JobStatus
from tests.support.db import admit, make_dataset
from tests.support.processes import run_cli

pytestmark = pytest.mark.integration

EPSILON, DELTA = 1.0, 1e-6

# One step: what it does and a number in [0, 1) that picks its size or its job.
operations = st.tuples(
    st.sampled_from(["reserve", "reserve", "start", "cancel", "fail", "cap", "restart"]),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_nan=False),
)


@dataclass
class Run:
    """The dataset under test and its jobs by status, as the steps moved them."""

    db_url: str
    dataset_id: uuid.UUID
    queued: list[uuid.UUID] = field(default_factory=list)
    running: list[uuid.UUID] = field(default_factory=list)
    epsilon: float = EPSILON

    def pick(self, jobs: list[uuid.UUID], x: float) -> uuid.UUID | None:
        return jobs[int(x * len(jobs))] if jobs else None


def _reserve(run: Run, x: float) -> None:
    with session_scope(run.db_url) as s:
        cap = ledger.running(s, run.dataset_id).mu_cap
        admitted = admit(s, run.dataset_id, jobs_service.JobRequest(k=1, mu=cap * (0.05 + x)))
    if admitted is not None:
        run.queued.append(admitted[0])


def _start(run: Run, x: float) -> None:
    """The worker's own start: re-plan, then queued -> running with the `commit` entry."""
    job_id = run.pick(run.queued, x)
    if job_id is None:
        return
    job_run = jobs_service.JobRun(run.db_url, job_id)
    queued = job_run.load()
    assert not isinstance(queued, str)
    started = job_run.start(queued, n_cols=2)
    assert isinstance(started, Job)
    run.queued.remove(job_id)
    run.running.append(job_id)


def _cancel(run: Run, x: float) -> None:
    """Cancel a queued job (refunded) or, now and then, a running one (stays charged)."""
    jobs = run.queued if x < 0.8 or not run.running else run.running
    job_id = run.pick(jobs, x)
    if job_id is None:
        return
    sessions = session_factory(run.db_url)
    with sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        jobs_service.cancel_job(s, job, None)
    if jobs is run.queued:
        run.queued.remove(job_id)


def _fail(run: Run, x: float) -> None:
    """A running job fails after its charge (audit entry only), or a queued one could not be
    queued (failed and refunded)."""
    if run.running and x < 0.5:
        job_id = run.running.pop(int(x * 2 * len(run.running)))
        jobs_service.JobRun(run.db_url, job_id).fail("failed in a test")
    elif (job_id := run.pick(run.queued, x)) is not None:
        with session_scope(run.db_url) as s:
            assert jobs_service.fail_unqueued(s, job_id, "not queued in a test")
        run.queued.remove(job_id)


def _cap(run: Run, x: float) -> None:
    """Raise or lower the cap (lowering it below what is used is refused, nothing changes)."""
    epsilon = run.epsilon * (0.5 + 1.5 * x)
    sessions = session_factory(run.db_url)
    with sessions() as s:
        dataset = s.get(Dataset, run.dataset_id)
        assert dataset is not None
        try:
            ledger.update_cap(s, dataset, epsilon, None, None)
            run.epsilon = epsilon
        except InvalidParameter:
            s.rollback()


def _restart(run: Run, x: float) -> None:
    """A duplicated queue entry: a second start of a job already running changes nothing."""
    job_id = run.pick(run.running, x)
    if job_id is None:
        return
    job_run = jobs_service.JobRun(run.db_url, job_id)
    assert job_run.load() == JobStatus.RUNNING
    with session_scope(run.db_url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        with pytest.raises(RuntimeError, match="refund"):
            ledger.refund(s, job, note="must not happen")


STEPS = {
    "reserve": _reserve,
    "start": _start,
    "cancel": _cancel,
    "fail": _fail,
    "cap": _cap,
    "restart": _restart,
}


def _assert_running_is_the_replay(run: Run) -> None:
    with session_scope(run.db_url) as s:
        dataset = s.get(Dataset, run.dataset_id)
        assert dataset is not None
        state = ledger.state_of(s, run.dataset_id)
        stored = ledger.running(s, run.dataset_id)
        assert stored == RunningBudget.of_state(state)  # exact: rationals and the job count
        # The same floats as the list-based arithmetic gives from the replay.
        listed = bmath.budget_state(state.spent_mus, state.reserved.values(), state.mu_cap, DELTA)
        shown = ledger.budget(s, dataset)
        assert (shown.mu_cap, shown.mu_spent, shown.mu_reserved, shown.mu_remaining) == (
            listed.mu_cap,
            listed.mu_spent,
            listed.mu_reserved,
            listed.mu_remaining,
        )
        assert shown.epsilon_remaining == listed.epsilon_remaining
        for mu in (1e-3, 0.1, 0.5):
            assert bmath.is_admissible_sq(stored.used_sq, mu, stored.mu_cap) == (
                bmath.is_admissible(state.live_mus, mu, state.mu_cap)
            )
    found = verify.check(session_factory(run.db_url), run.dataset_id)
    assert found is not None and found.agrees, found


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(count=st.booleans(), steps=st.lists(operations, min_size=1, max_size=14))
def test_the_running_budget_is_the_replay_after_every_step(
    db_url: str, count: bool, steps: list[tuple[str, float]]
) -> None:
    cap = bmath.cap_from_epsilon_delta(EPSILON, DELTA)
    dataset_id = make_dataset(
        db_url, mu_cap=cap, epsilon=EPSILON, delta=DELTA, count_mu=0.1 * cap if count else None
    )
    run = Run(db_url, dataset_id)
    _assert_running_is_the_replay(run)
    for name, x in steps:
        # Refused (over budget) or already finished: the step changes nothing.
        with contextlib.suppress(BudgetExceeded, Conflict):
            STEPS[name](run, x)
        _assert_running_is_the_replay(run)


def test_the_last_of_the_budget_then_a_refund_frees_exactly_it(db_url: str) -> None:
    cap = bmath.cap_from_epsilon_delta(EPSILON, DELTA)
    dataset_id = make_dataset(db_url, mu_cap=cap, epsilon=EPSILON, delta=DELTA)
    run = Run(db_url, dataset_id)
    mus = [cap / math.sqrt(3)] * 3  # exactly the cap, within the admission tolerance
    with session_scope(db_url) as s:
        for mu in mus:
            admitted = admit(s, dataset_id, jobs_service.JobRequest(k=1, mu=mu))
            assert admitted is not None
            run.queued.append(admitted[0])
        assert admit(s, dataset_id, jobs_service.JobRequest(k=1, mu=cap * 0.05)) is None
    _cancel(run, 0.0)
    _assert_running_is_the_replay(run)
    with session_scope(db_url) as s:
        assert admit(s, dataset_id, jobs_service.JobRequest(k=1, mu=mus[0])) is not None
        assert ledger.running(s, dataset_id).jobs == 4


def test_ledger_verify_agrees_and_names_a_dataset_that_does_not(settings) -> None:
    import os

    url = settings.resolved_database_url
    cap = bmath.cap_from_epsilon_delta(EPSILON, DELTA)
    good = make_dataset(url, mu_cap=cap, epsilon=EPSILON, delta=DELTA, count_mu=0.1 * cap)
    bad = make_dataset(url, mu_cap=cap, epsilon=EPSILON, delta=DELTA)
    for dataset_id in (good, bad):
        run = Run(url, dataset_id)
        _reserve(run, 0.1)
        _start(run, 0.0)
        _reserve(run, 0.2)
    env = dict(os.environ)
    done = run_cli(["ledger", "verify"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 datasets, 9 ledger entries replayed: all agree" in done.stdout

    # The running budget no longer what its ledger says (as a write outside the ledger
    # service would leave it): named, and the command fails.
    with session_scope(url) as s:
        s.execute(
            text("UPDATE dataset_budgets SET jobs = jobs + 1 WHERE dataset_id = :id"),
            {"id": bad if s.get_bind().dialect.name != "sqlite" else bad.hex},
        )
    done = run_cli(["ledger", "verify", "--quiet"], env)
    assert done.returncode == 1
    assert f"dataset {bad}: MISMATCH" in done.stderr and "jobs stored 3 replayed 2" in done.stderr
    assert str(good) not in done.stdout + done.stderr
    assert "1 MISMATCHED" in done.stdout
    assert run_cli(["ledger", "verify", "--dataset", str(good)], env).returncode == 0
    missing = run_cli(["ledger", "verify", "--dataset", str(uuid.uuid4())], env)
    assert missing.returncode == 2 and "no dataset" in missing.stderr
