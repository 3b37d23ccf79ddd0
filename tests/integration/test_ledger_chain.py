"""The ledger's hash chain through the real database and `privclust ledger verify`.

What an operator checks: an untampered ledger passes, also after admissions, starts, failures
and cancellations raced on one dataset; a commit entry whose mu was halved or
whose sigma was doubled, a job row whose mu was halved, and an entry moved to another dataset
together with both running budgets (so that the replays still agree) each make verify exit 1
naming the entry; and migration 0008_ledger_chain seals existing entries exactly as the service
does.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.jobs import service as jobs_service
from app.jobs.planning import plan_mismatch
from app.kit.config import Settings
from app.kit.db.migrate import alembic_config
from app.kit.db.session import get_engine, session_factory, session_scope
from app.ledger import service as ledger
from app.ledger import verify
from app.ledger.state import RunningBudget
from app.models import DatasetBudget, Job, LedgerEntry, LedgerKind
from tests.support.db import admit, make_dataset
from tests.support.processes import run_cli

pytestmark = pytest.mark.integration


def _ledger_of_two_jobs(url: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A dataset with its count, a job that started (reserve, commit) and then failed, and a
    job still queued; (the dataset, the started job)."""
    dataset_id = make_dataset(url, mu_cap=5.0, count_mu=0.1, n_rows_dp=900)
    with session_scope(url) as s:
        started = admit(s, dataset_id, jobs_service.JobRequest(k=2, epsilon=1.0))
        assert admit(s, dataset_id, jobs_service.JobRequest(k=3, mu=0.4)) is not None
    assert started is not None
    job_run = jobs_service.JobRun(url, started[0])
    queued = job_run.load()
    assert not isinstance(queued, str)
    assert isinstance(job_run.start(queued, n_cols=2), Job)
    job_run.fail("failed in a test")
    return dataset_id, started[0]


def _db_id(session: Session, value: uuid.UUID) -> object:
    """A uuid as a raw SQL parameter (SQLite stores it as 32 hex digits)."""
    return value.hex if session.get_bind().dialect.name == "sqlite" else value


def _commit_of(session: Session, job_id: uuid.UUID) -> LedgerEntry:
    stmt = select(LedgerEntry).where(
        LedgerEntry.job_id == job_id, LedgerEntry.kind == LedgerKind.COMMIT
    )
    entry = session.scalars(stmt).one()
    return entry


def _budget_to_replay(session: Session, dataset_id: uuid.UUID) -> None:
    """Rewrite the running budget to what its ledger replays to (hiding a change from the
    replay, as someone who moved an entry would)."""
    row = session.get(DatasetBudget, dataset_id)
    assert row is not None
    RunningBudget.of_state(ledger.state_of(session, dataset_id)).write_to(row)


def _halve_commit_mu(s: Session, entry: LedgerEntry, other: uuid.UUID) -> None:
    s.execute(text("UPDATE ledger_entries SET mu = mu / 2 WHERE id = :id"), {"id": entry.id})


def _double_commit_sigma(s: Session, entry: LedgerEntry, other: uuid.UUID) -> None:
    s.execute(text("UPDATE ledger_entries SET sigma = sigma * 2 WHERE id = :id"), {"id": entry.id})


def _halve_job_mu(s: Session, entry: LedgerEntry, other: uuid.UUID) -> None:
    assert entry.job_id is not None
    s.execute(text("UPDATE jobs SET mu = mu / 2 WHERE id = :id"), {"id": _db_id(s, entry.job_id)})


def _move_with_running_budget(s: Session, entry: LedgerEntry, other: uuid.UUID) -> None:
    s.execute(
        text("UPDATE ledger_entries SET dataset_id = :other WHERE id = :id"),
        {"other": _db_id(s, other), "id": entry.id},
    )
    for dataset_id in (entry.dataset_id, other):
        _budget_to_replay(s, dataset_id)


Tamper = Callable[[Session, LedgerEntry, uuid.UUID], None]


@pytest.mark.parametrize(
    "tamper",
    [_halve_commit_mu, _double_commit_sigma, _halve_job_mu, _move_with_running_budget],
    ids=["commit-mu-halved", "commit-sigma-doubled", "job-mu-halved", "entry-moved"],
)
def test_verify_names_a_tampered_entry(settings: Settings, tamper: Tamper) -> None:
    url = settings.resolved_database_url
    dataset_id, job_id = _ledger_of_two_jobs(url)
    other, _ = _ledger_of_two_jobs(url)
    env = dict(os.environ)
    clean = run_cli(["ledger", "verify"], env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "all agree" in clean.stdout and "chain head" in clean.stdout

    with session_scope(url) as s:
        commit = _commit_of(s, job_id)
        tamper(s, commit, other)
    for checked in (dataset_id, other):  # the replay alone no longer sees anything
        found = verify.check(session_factory(url), checked)
        assert found is not None and found.stored == found.replayed

    done = run_cli(["ledger", "verify"], env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"entry {commit.id} (commit of job {job_id})" in done.stderr, done.stderr
    assert "1 MISMATCHED" in done.stdout or "2 MISMATCHED" in done.stdout


def test_the_chain_stays_whole_when_every_kind_of_entry_races(settings: Settings) -> None:
    url = settings.resolved_database_url
    dataset_id = make_dataset(url, mu_cap=5.0, count_mu=0.1, n_rows_dp=900)
    queued = []
    with session_scope(url) as s:
        for _ in range(6):
            admitted = admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.3))
            assert admitted is not None
            queued.append(admitted[0])
    get_engine(url).pool.dispose()
    barrier = threading.Barrier(12)
    sessions = session_factory(url)

    def one(i: int) -> None:
        barrier.wait()
        if i >= 6:  # a new admission (reserve)
            with sessions() as s:
                assert admit(s, dataset_id, jobs_service.JobRequest(k=2, mu=0.3)) is not None
        elif i % 2:  # a cancellation (refund, cancelled)
            with sessions() as s:
                job = s.get(Job, queued[i])
                assert job is not None
                jobs_service.cancel_job(s, job, None)
        else:  # a start then a failure (commit, failed)
            job_run = jobs_service.JobRun(url, queued[i])
            loaded = job_run.load()
            assert not isinstance(loaded, str)
            assert isinstance(job_run.start(loaded, n_cols=2), Job)
            job_run.fail("failed in a test")

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(one, range(12)))
    found = verify.check(sessions, dataset_id, plan_mismatch)
    assert found is not None and found.agrees and found.entries == 2 + 6 + 6 + 3 * 2 + 3 * 2
    assert not found.breaks, found.describe()


def test_migration_0008_seals_existing_entries_as_the_service_does(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chain.db'}"
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")
    dataset_id, _ = _ledger_of_two_jobs(url)
    before = _hashes(url)

    command.downgrade(cfg, "0007")
    command.upgrade(cfg, "0008_ledger_chain")
    assert _hashes(url) == before
    command.upgrade(cfg, "head")  # the revisions after 0008 keep the chain as it is
    assert _hashes(url) == before
    found = verify.check(session_factory(url), dataset_id)
    assert found is not None and found.agrees, found.describe()


def _hashes(url: str) -> list[tuple[str, str]]:
    with session_scope(url) as s:
        rows = s.execute(
            select(LedgerEntry.prev_hash, LedgerEntry.entry_hash).order_by(LedgerEntry.id)
        )
        heads = s.scalars(select(DatasetBudget.last_hash)).all()
        return [tuple(r) for r in rows] + [(h, h) for h in heads]
