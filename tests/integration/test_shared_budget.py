"""A budget a team shares, under load: 200 admissions at once from 10 keys (5 capped, one of them
paced, under a dataset pace), through the admission service on the real database (SQLite, or
PostgreSQL when PRIVCLUST_TEST_DATABASE_URL is set). No cap and no pace is exceeded, every
refusal names the limit that was full, and `privclust ledger verify` finds every key's spend
where its ledger entries put it."""

from __future__ import annotations

import math
import os
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from app.jobs import service as jobs_service
from app.keys.service import create_key
from app.kit.db.session import get_engine, session_factory, session_scope
from app.kit.errors import BudgetExceeded
from app.ledger import key_caps, verify
from app.ledger.pace import PacePeriod
from app.models import Dataset, Job
from tests.support.clock import ManualClock
from tests.support.db import admit_or_refusal, make_dataset
from tests.support.processes import run_cli

pytestmark = pytest.mark.integration

JOB_MU = 0.25  # each job: mu^2 = 1/16, exact in binary
DATASET_CAP = 1.5  # 36 jobs
DATASET_PACE = 1.4  # 31 jobs a day (31/16 <= 1.96 < 32/16)
KEY_CAP = 0.45  # 3 jobs (3/16 <= 0.2025 < 4/16)
KEY_PACE = 0.36  # 2 jobs a day (2/16 <= 0.1296 < 3/16)
PER_KEY = 20  # 200 admissions at once, as many as the issue asked for


def _team(db_url: str) -> list[uuid.UUID]:
    """Ten analyst keys of tenant acme."""
    with session_scope(db_url) as s:
        made = [create_key(s, tenant="acme", role="analyst").key for _ in range(10)]
        s.flush()
        return [k.id for k in made]


def _cap(db_url: str, dataset_id: uuid.UUID, key: uuid.UUID, paced: bool, now: ManualClock) -> None:
    pace = key_caps.PaceSetting(PacePeriod.DAY, KEY_PACE) if paced else None
    setting = key_caps.KeyCapSetting(mu=KEY_CAP, pace=pace)
    with session_scope(db_url) as s:
        dataset = s.get(Dataset, dataset_id)
        assert dataset is not None
        key_caps.set_key_cap(s, dataset, key, setting, None, now.now())


def _pace_dataset(db_url: str, dataset_id: uuid.UUID, clock: ManualClock) -> None:
    change = key_caps.BudgetChange(
        None, None, True, key_caps.PaceSetting(PacePeriod.DAY, DATASET_PACE)
    )
    with session_scope(db_url) as s:
        dataset = s.get(Dataset, dataset_id)
        assert dataset is not None
        key_caps.update_budget(s, dataset, change, None, clock.now())


def _admit_at_once(
    db_url: str, dataset_id: uuid.UUID, actors: list[uuid.UUID], clock: ManualClock
) -> list[tuple[uuid.UUID, str]]:
    """One admission per actor, all at once, each on its own thread and connection: (actor,
    "admitted" or the refusal's code and cap)."""
    barrier = threading.Barrier(len(actors))
    factory = session_factory(db_url)

    def one(actor: uuid.UUID) -> tuple[uuid.UUID, str]:
        session = factory()
        try:
            barrier.wait()
            req = jobs_service.JobRequest(k=2, mu=JOB_MU)
            got = admit_or_refusal(session, dataset_id, req, actor=actor, clock=clock)
            if isinstance(got, BudgetExceeded):
                return actor, f"{got.code}/{got.extra['cap']}"
            return actor, "admitted"
        finally:
            session.close()

    with ThreadPoolExecutor(len(actors)) as pool:
        return list(pool.map(one, actors))


def _admitted_by_key(db_url: str, dataset_id: uuid.UUID) -> Counter[uuid.UUID]:
    with session_scope(db_url) as s:
        jobs = s.query(Job).filter(Job.dataset_id == dataset_id).all()
        return Counter(job.created_by for job in jobs if job.created_by is not None)


def test_200_concurrent_jobs_from_10_keys_never_pass_a_cap_or_a_pace(db_url: str) -> None:
    clock = ManualClock()
    dataset_id = make_dataset(db_url, mu_cap=DATASET_CAP)
    team = _team(db_url)
    capped, uncapped = team[:5], team[5:]
    for i, key in enumerate(capped):
        _cap(db_url, dataset_id, key, paced=i == 0, now=clock)
    _pace_dataset(db_url, dataset_id, clock)
    get_engine(db_url).pool.dispose()

    # Day one: the dataset's pace (31 jobs) binds before its cap (36).
    answers = _admit_at_once(db_url, dataset_id, team * PER_KEY, clock)
    admitted = _admitted_by_key(db_url, dataset_id)
    assert sum(admitted.values()) == 31
    assert admitted[capped[0]] <= 2 and all(admitted[k] <= 3 for k in capped[1:])
    for actor, answer in answers:
        if answer == "key-budget-exceeded/key":
            assert actor in capped and admitted[actor] == (2 if actor == capped[0] else 3)
        elif answer == "pace-exceeded/key-pace":
            assert actor == capped[0] and admitted[actor] == 2
        elif answer == "pace-exceeded/dataset-pace":
            assert sum(admitted.values()) == 31
        else:
            assert answer == "admitted", answer
    assert Counter(a for _, a in answers)["admitted"] == 31
    _assert_verified(db_url, dataset_id, len(capped))

    # Day two: the pace allows again, and the lifetime cap stops the team at 36 jobs.
    clock.advance(days=1)
    answers = _admit_at_once(db_url, dataset_id, uncapped * 2, clock)
    assert sum(_admitted_by_key(db_url, dataset_id).values()) == 36
    assert Counter(a for _, a in answers) == {"admitted": 5, "budget-exceeded/dataset": 5}
    _assert_verified(db_url, dataset_id, len(capped))


def _assert_verified(db_url: str, dataset_id: uuid.UUID, capped: int) -> None:
    check = verify.check(session_factory(db_url), dataset_id)
    assert check is not None and check.agrees, check.describe() if check else None
    assert len(check.keys) == capped
    for key in check.keys:
        assert key.within_cap
        assert math.sqrt(float(key.stored.used_sq)) <= KEY_CAP


def test_ledger_verify_names_a_key_whose_spend_moved_outside_the_ledger(db_url: str) -> None:
    clock = ManualClock()
    dataset_id = make_dataset(db_url, mu_cap=DATASET_CAP)
    (key,) = _team(db_url)[:1]
    _cap(db_url, dataset_id, key, paced=False, now=clock)
    with session_scope(db_url) as s:
        req = jobs_service.JobRequest(k=2, mu=JOB_MU)
        assert not isinstance(
            admit_or_refusal(s, dataset_id, req, actor=key, clock=clock), Exception
        )
    env = dict(os.environ, PRIVCLUST_DATABASE_URL=db_url)
    done = run_cli(["ledger", "verify"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    with session_scope(db_url) as s:
        sqlite = s.get_bind().dialect.name == "sqlite"
        s.execute(
            text("UPDATE key_budgets SET jobs = jobs + 1 WHERE key_id = :id"),
            {"id": key.hex if sqlite else key},
        )
    done = run_cli(["ledger", "verify", "--quiet"], env)
    assert done.returncode == 1
    assert f"key {key}" in done.stderr and "jobs stored 2 replayed 1" in done.stderr
