"""A federated job's reservations on its members never outlive it: when the coordinator's
worker dies, the job's failure (by the stale-job sweeper, or when its process is lost) is told
to every member, which refunds unless it answered a release; and a member that hears nothing
ends the job on its own after its reservation's idle time."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.federation.expiry import expire_member_jobs
from app.jobs import service as jobs_service
from app.kit.config import Settings
from app.kit.db.base import utcnow
from app.kit.db.session import session_factory, session_scope
from app.models import MemberJob
from privclust.clustering.data.release import Gaussian
from tests.integration.test_federation_member_jobs import (
    SENSITIVITY,
    STATISTIC,
    answers,
    joined,
    release_body,
)
from tests.support.api import auth
from tests.support.federation import budget, make_members, pooled

pytestmark = pytest.mark.integration


def _member_jobs(settings: Settings, job: str) -> list[MemberJob]:
    with session_scope(settings.resolved_database_url) as s:
        rows = s.query(MemberJob).filter(MemberJob.job == job).all()
        s.expunge_all()
        return rows


def _started(client: TestClient, keys: dict[str, str], settings: Settings, dataset) -> tuple:
    """A federated job admitted (every member reserved it) and started by a worker (its charge
    committed), whose worker then stops before anything else."""
    resp = client.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        headers=auth(keys["analyst"]),
        json={"k": 3, "algorithm": "fastlloyd", "mu": 1},
    )
    assert resp.status_code == 202, resp.text
    run = jobs_service.JobRun(settings.resolved_database_url, uuid.UUID(resp.json()["id"]))
    queued = run.load()
    assert not isinstance(queued, str) and queued.calls is not None
    job = run.start(queued, n_cols=2)
    assert not isinstance(job, str)
    return run, queued, str(job.id)


@pytest.mark.slow
@pytest.mark.parametrize("answered", [False, True])
@pytest.mark.parametrize("end", ["swept", "lost"])
def test_a_job_whose_worker_died_is_ended_on_every_member(
    client: TestClient, keys: dict[str, str], settings: Settings, answered: bool, end: str
) -> None:
    with pooled(client, keys, member_epsilon=20) as (members, dataset):  # its count: released
        before = [budget(client, keys["owner"], m["dataset"]["id"]) for m in members]
        run, queued, job_id = _started(client, keys, settings, dataset)
        assert all(budget(client, keys["owner"], m["dataset"]["id"])["mu_reserved"] > 0.99
                   for m in members)  # fmt: skip
        if answered:  # the worker got one release through before it died
            calls = queued.calls(settings)
            calls.observer = run.record_members  # as the worker records each release
            calls.join()
            calls.release(STATISTIC, [Gaussian(SENSITIVITY, 4.0)])
            calls.close()
        if end == "swept":
            time.sleep(0.01)  # the heartbeat is now older than a stale time of 0 s
            with session_scope(settings.resolved_database_url) as s:
                assert jobs_service.sweep_stale_jobs(s, 0.0) == [uuid.UUID(job_id)]
        else:
            assert run.lost() == "failed"
    mine = _member_jobs(settings, job_id)
    assert len(mine) == 3
    shown = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()["members"]
    told = [{"position": i, "status": "finished", "releases": int(answered)} for i in range(3)]
    assert shown == told
    assert {m.status for m in mine} == {"failed" if answered else "cancelled"}
    for m, was in zip(members, before, strict=True):
        held = budget(client, keys["owner"], m["dataset"]["id"])
        assert held["mu_reserved"] == 0.0  # nothing left reserved for ever
        # Refunded when it answered nothing; a member that answered keeps its charge (mu = 1
        # composed with what it had spent: sqrt(spent^2 + 1)).
        spent = (was["mu_spent"] ** 2 + 1.0) ** 0.5 if answered else was["mu_spent"]
        assert held["mu_spent"] == pytest.approx(spent)


def test_a_member_ends_a_job_it_heard_nothing_of_after_its_idle_time(
    client: TestClient, keys: dict[str, str], settings: Settings
) -> None:
    members = make_members(client, keys)
    before = [budget(client, keys["owner"], m["dataset"]["id"]) for m in members[:2]]
    silent = joined(client, members[:2], mu=0.5, job="silent")
    answered = joined(client, members[:2], mu=0.5, job="answered")
    answers(client, members[:2], answered, 0, release_body(sigma=4.0))
    joined(client, members[:2], mu=0.5, job="fresh")
    idle = timedelta(seconds=settings.federation_reservation_seconds)
    later = utcnow() + idle + timedelta(seconds=1)
    with session_scope(settings.resolved_database_url) as s:
        for row in s.query(MemberJob).filter(MemberJob.job == "fresh"):
            row.created_at = later - timedelta(seconds=2)  # joined within the idle time
    sessions = session_factory(settings.resolved_database_url)
    with sessions() as s:
        assert expire_member_jobs(s, idle, utcnow()) == []  # nothing idle that long yet
        ended = expire_member_jobs(s, idle, later)
    assert sorted(ended) == sorted(uuid.UUID(i) for i in silent + answered)
    statuses: dict[str, Any] = {
        name: {m.status for m in _member_jobs(settings, name)}
        for name in ("silent", "answered", "fresh")
    }
    assert statuses == {"silent": {"cancelled"}, "answered": {"failed"}, "fresh": {"running"}}
    for m, was in zip(members[:2], before, strict=True):
        held = budget(client, keys["owner"], m["dataset"]["id"])
        # "fresh" still reserved; "silent" refunded; "answered" spent (mu 0.5 composed).
        assert held["mu_reserved"] == pytest.approx(0.5)
        assert held["mu_spent"] == pytest.approx((was["mu_spent"] ** 2 + 0.25) ** 0.5)
    # An ended job answers no further release.
    resp = client.post(
        f"/v1/federation/jobs/{silent[0]}/releases/0",
        headers=auth(members[0]["key"]),
        json=release_body(sigma=4.0),
    )
    assert resp.status_code == 409 and resp.json()["code"] == "member-job-finished"
