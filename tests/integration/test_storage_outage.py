"""Object storage down at the wrong moment, through the real API, database and Redis, the
worker's task run in this process, and the datasets on a fake S3 (moto's server over real
HTTP: tests/support/s3.py), stopped to make it unreachable.

What a user checks: a job whose rows cannot be read when it starts fails with "nothing was
charged" and its reservation refunded (no `commit` entry); an upload cut by the outage leaves no
object in the bucket once its cleanup has run.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.datasets import service as datasets_service
from app.datasets import storage
from app.datasets.storage import remote
from app.kit.config import Settings, get_settings
from app.kit.db.session import session_factory
from tests.support.api import auth, upload, uploaded
from tests.support.data import csv_bytes
from tests.support.s3 import FakeS3, fake_s3

pytestmark = pytest.mark.integration


@pytest.fixture
def s3(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeS3]:
    """A fake S3 that holds the service's datasets (40 rows a part)."""
    with fake_s3() as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("PRIVCLUST_STORAGE_URL", server.url("datasets"))
        monkeypatch.setenv("PRIVCLUST_PARTITION_ROWS", "40")
        get_settings.cache_clear()
        yield server


@pytest.fixture
def s3_client(s3: FakeS3) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(get_settings())) as c:
        yield c


def _rows(n: int, seed: int) -> bytes:
    return csv_bytes(np.random.default_rng(seed).normal(0.0, 2.0, (n, 2)), ["x", "y"])


def _ledger_kinds(client: TestClient, key: str, dataset_id: str, job_id: str) -> list[str]:
    r = client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key))
    return [e["kind"] for e in r.json()["entries"] if e["job_id"] == job_id]


def test_a_job_whose_rows_cannot_be_read_at_its_start_is_refunded(
    s3_client: TestClient, s3: FakeS3, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.tasks import run_clustering_job

    ds = uploaded(s3_client, keys["owner"], _rows(100, 1), radius="10")
    r = s3_client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "mu": 0.2}
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    s3.stop()
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no retries: the test need not wait for them
    assert run_clustering_job(job_id) == "failed"

    job = s3_client.get(f"/v1/jobs/{job_id}", headers=auth(keys["analyst"])).json()
    assert job["status"] == "failed" and "nothing was charged" in job["error"], job
    assert "s3://" not in job["error"]  # the store's address is for the operator's log
    assert _ledger_kinds(s3_client, keys["owner"], ds["id"], job_id) == [
        "reserve",
        "refund",
        "failed",
    ]
    budget = s3_client.get(f"/v1/datasets/{ds['id']}/budget", headers=auth(keys["owner"])).json()
    assert budget["mu_reserved"] == 0.0 and budget["mu_spent"] == pytest.approx(ds["count_mu"])


def test_an_upload_cut_by_the_outage_leaves_no_object_once_cleaned_up(
    s3_client: TestClient, s3: FakeS3, keys: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = get_settings()
    flush = remote.ParquetRowsWriter._flush
    cut = [True]

    def cut_after_the_first_part(writer: remote.ParquetRowsWriter) -> None:
        flush(writer)
        if cut:
            cut.clear()
            s3.stop()  # the store goes down with one part of the upload's rows in the bucket

    monkeypatch.setattr(remote.ParquetRowsWriter, "_flush", cut_after_the_first_part)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    up = upload(s3_client, keys["owner"], _rows(100, 2), radius="10")
    assert up["status"] == 503 and up["body"]["code"] == "storage-unavailable", up

    s3.restart()
    left = s3.object_keys("datasets/")
    assert len(left) == 1 and left[0].endswith("part-00000.parquet"), left  # what was cut
    listed = s3_client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"]
    assert listed == []  # no dataset names it, and nothing was charged

    sessions = session_factory(settings.resolved_database_url)

    def referenced() -> set[str]:
        with sessions() as session:
            return datasets_service.stored_file_names(session)

    # The API's sweep (at start-up and every 10 minutes), long before the rows are an hour old.
    removed = storage.remove_abandoned_rows(
        settings.resolved_storage_url, settings.datasets_dir, referenced
    )
    assert [str(r.path) for r in removed] == [s3.url("datasets", left[0].split("/")[1])]
    assert s3.object_keys("datasets/") == []
