"""The API's sweeper checks the running budgets against their ledgers a bounded batch at a time,
continuing where the last batch stopped, and a dataset that differs is logged and counted in
`privclust_ledger_mismatched_datasets` until a check finds it agreeing again.

The batches share a cursor and a lock in Redis with every API process's own sweeper, which
checks a batch on its own clock: the app these tests run has its background check turned off
(PRIVCLUST_LEDGER_CHECK_SECONDS=0), so the only batches are the test's, however slowly it runs.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.jobs import service as jobs_service
from app.jobs.sweeper import Sweeper
from app.kit.config import Settings, get_settings
from app.kit.db.session import session_factory, session_scope
from tests.support.api import auth
from tests.support.db import admit, make_dataset

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The tests' settings, with no background ledger check in the app's own sweeper."""
    monkeypatch.setenv("PRIVCLUST_LEDGER_CHECK_SECONDS", "0")
    get_settings.cache_clear()
    return get_settings()


def _checked(sweeper: Sweeper, max_entries: int) -> list:
    """The datasets one batch checked; the batch must have run (no other check held the lock)."""
    checks = sweeper.check_ledgers(max_entries=max_entries)
    assert checks is not None, "the batch did not run: another ledger check held the lock"
    return checks


def _mismatched(client: TestClient, admin: str) -> float:
    r = client.get("/metrics", headers=auth(admin))
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            if sample.name == "privclust_ledger_mismatched_datasets":
                return float(sample.value)
    raise AssertionError("no privclust_ledger_mismatched_datasets in /metrics")


def _jobs_bump(url: str, dataset_id: object, by: int) -> None:
    with session_scope(url) as s:
        dataset = dataset_id if s.get_bind().dialect.name != "sqlite" else dataset_id.hex  # type: ignore[attr-defined]
        s.execute(
            text("UPDATE dataset_budgets SET jobs = jobs + :by WHERE dataset_id = :id"),
            {"by": by, "id": dataset},
        )


def test_the_sweeper_checks_in_batches_and_reports_a_mismatch(
    client: TestClient, keys, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    url = settings.resolved_database_url
    datasets = sorted(make_dataset(url, mu_cap=5.0, count_mu=0.1, n_rows_dp=900) for _ in range(3))
    with session_scope(url) as s:
        for d in datasets:
            assert admit(s, d, jobs_service.JobRequest(k=2, mu=0.5)) is not None
    sweeper = Sweeper(settings, session_factory(url))

    # Three entries a dataset: a batch of 4 entries checks two datasets, the next one the
    # third, and the one after that starts again from the first.
    assert [c.dataset_id for c in _checked(sweeper, 4)] == datasets[:2]
    assert [c.dataset_id for c in _checked(sweeper, 4)] == datasets[2:]
    assert _mismatched(client, keys["admin"]) == 0

    _jobs_bump(url, datasets[0], 1)  # written behind the ledger service's back
    with caplog.at_level("ERROR", logger="privclust.api"):
        checks = _checked(sweeper, 4)
    assert [c.agrees for c in checks] == [False, True]
    assert f"dataset {datasets[0]}: MISMATCH" in caplog.text
    assert _mismatched(client, keys["admin"]) == 1

    _jobs_bump(url, datasets[0], -1)
    assert [c.dataset_id for c in _checked(sweeper, 100)] == datasets[2:]  # the round's rest
    assert _mismatched(client, keys["admin"]) == 1  # not checked again yet
    assert [c.dataset_id for c in _checked(sweeper, 100)] == datasets
    assert _mismatched(client, keys["admin"]) == 0
