"""Imports by reference through the real API, database and Redis, with the worker's task run in
this process (as a worker would run it), and datasets in object storage on a fake S3 (moto's
server over real HTTP: tests/support/s3.py).

What a user checks: 202 `importing`, then `ready` with a noisy count charged once to the ledger;
the service keeps its own clipped copy; sources outside the allow-list create and charge
nothing; bad data ends `failed` with a reason that names no value; nothing runs on a dataset
that is not ready; a store that is down answers 503 to an upload and fails an import.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.datasets import imports, storage
from app.datasets.domain import DomainClip, DomainSpec
from app.kit.config import Settings, get_settings
from app.kit.db.session import session_factory, session_scope
from app.models import Dataset, LedgerEntry
from privclust.privacy import noise
from tests.support.api import auth, upload
from tests.support.data import csv_bytes
from tests.support.fair_worker import run_tasks_here
from tests.support.s3 import FakeS3

pytestmark = pytest.mark.integration

COLUMNS = ["x", "y"]


def _rows(n: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(0.0, 4.0, (n, 2))
    rows[3] = [250.0, -1e6]  # far outside the declared ball: clipped, never rejected
    return rows


def _write_parquet(path: Path | str, rows: np.ndarray, **extra: Any) -> None:
    table = pa.table({"x": rows[:, 0], "y": rows[:, 1], **extra})
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    else:
        with storage.location.filesystem(path).open(path, "wb") as f:
            pq.write_table(table, f)


def _clipped(rows: np.ndarray, spec: DomainSpec) -> np.ndarray:
    clip = DomainClip(spec)
    clip.start(rows.shape[1])
    out = np.array(rows, dtype=np.float64)
    clip(out)
    return out


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def settings(settings: Settings, lake: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The tests' settings, with imports allowed from the local `lake` folder."""
    monkeypatch.setenv("PRIVCLUST_IMPORT_SOURCES", str(lake))
    get_settings.cache_clear()
    return get_settings()


@pytest.fixture
def s3_client(
    s3: FakeS3, lake: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """The app with its datasets in the fake S3, importing from the local lake and s3://.../lake."""
    from app.main import create_app

    monkeypatch.setenv("PRIVCLUST_STORAGE_URL", s3.url("datasets"))
    monkeypatch.setenv("PRIVCLUST_IMPORT_SOURCES", f"{lake},{s3.url('lake')}")
    monkeypatch.setenv("PRIVCLUST_PARTITION_ROWS", "40")
    get_settings.cache_clear()
    with TestClient(create_app(get_settings())) as c:
        yield c


def _import(client: TestClient, key: str, source: str, **fields: str) -> dict:
    form = {"name": "lake", "epsilon": "2", "delta": "1e-6", "radius": "10", "source": source}
    form.update(fields)
    r = client.post(
        "/v1/datasets", headers=auth(key), files={k: (None, v) for k, v in form.items()}
    )
    return {"status": r.status_code, "body": r.json()}


def _run(dataset_id: str) -> str:
    from worker.imports import run_import

    return run_import(dataset_id)


def _get(client: TestClient, key: str, dataset_id: str) -> dict:
    r = client.get(f"/v1/datasets/{dataset_id}", headers=auth(key))
    assert r.status_code == 200, r.text
    return r.json()


def _ledger(client: TestClient, key: str, dataset_id: str) -> list[dict]:
    return client.get(f"/v1/datasets/{dataset_id}/ledger", headers=auth(key)).json()["entries"]


def _stored(settings: Settings, dataset_id: str) -> str | None:
    with session_scope(settings.resolved_database_url) as s:
        dataset = s.get(Dataset, uuid.UUID(dataset_id))
        assert dataset is not None
        return dataset.storage_path


def _nothing_created(client: TestClient, keys: dict, settings: Settings) -> None:
    assert client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"] == []
    with session_scope(settings.resolved_database_url) as s:
        assert s.scalar(select(func.count()).select_from(LedgerEntry)) == 0


def test_an_import_from_a_local_folder_is_copied_clipped_and_counted_once(
    client: TestClient, keys: dict, settings: Settings, lake: Path
) -> None:
    first, second = _rows(60, 1), _rows(40, 2)
    _write_parquet(lake / "exports" / "part-0.parquet", first, label=["a"] * 60)
    _write_parquet(lake / "exports" / "part-1" / "data.parquet", second, label=["b"] * 40)
    (lake / "exports" / "_SUCCESS").write_text("")
    _write_parquet(lake / "exports" / ".part-9.parquet", np.full((5, 2), np.nan))

    accepted = _import(client, keys["owner"], f"{lake}/exports", columns="x,y")
    assert accepted["status"] == 202, accepted
    ds = accepted["body"]
    assert ds["status"] == "importing" and ds["progress"] == 0.0
    assert (ds["n_rows"], ds["n_rows_dp"], ds["n_cols"]) == (None, None, None)
    assert ds["source"] == str(lake / "exports") and ds["columns"] == COLUMNS
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap"]

    assert _run(ds["id"]) == "ready"
    ready = _get(client, keys["owner"], ds["id"])
    assert ready["status"] == "ready" and ready["progress"] == 1.0
    assert (ready["n_rows"], ready["n_cols"], ready["columns"]) == (100, 2, COLUMNS)
    assert isinstance(ready["n_rows_dp"], int)
    assert ready["domain"]["center"] == [0.0, 0.0] and ready["failure_reason"] is None
    entries = _ledger(client, keys["owner"], ds["id"])
    assert [e["kind"] for e in entries] == ["cap", "count"]
    assert entries[1]["mu"] == ready["count_mu"] and entries[1]["iterations"] == 1
    assert math.isclose(ready["budget"]["mu_spent"], ready["count_mu"])
    analyst_view = _get(client, keys["analyst"], ds["id"])
    assert analyst_view["n_rows"] is None and analyst_view["source"] is None
    assert analyst_view["progress"] is None  # how fast it grew would tell the source's size

    # The service's own copy: the rows in path order, clipped, bit for bit.
    expected = _clipped(np.vstack([first, second]), DomainSpec(radius=10.0))
    stored = _stored(settings, ds["id"])
    assert stored is not None and storage.read_all(stored).tobytes() == expected.tobytes()
    _write_parquet(lake / "exports" / "part-0.parquet", -first)  # the source changes later
    assert storage.read_all(stored).tobytes() == expected.tobytes()

    # A retried or duplicated task finds the import done: nothing is charged or drawn again.
    assert _run(ds["id"]) == "ready"
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap", "count"]
    assert _get(client, keys["owner"], ds["id"])["n_rows_dp"] == ready["n_rows_dp"]
    job = client.post(
        f"/v1/datasets/{ds['id']}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "epsilon": 1}
    )
    assert job.status_code == 202, job.text


def test_an_upload_on_s3_streams_into_parquet_partitions_and_deletes_them(
    s3_client: TestClient, keys: dict, s3: FakeS3
) -> None:
    rows = _rows(100, 3)
    up = upload(s3_client, keys["owner"], csv_bytes(rows, COLUMNS), radius="10")
    assert up["status"] == 201, up
    ds = up["body"]
    assert ds["status"] == "ready" and ds["progress"] is None and ds["n_rows"] == 100
    stored = _stored(get_settings(), ds["id"])
    assert stored == s3.url("datasets", ds["id"].replace("-", ""))
    parts = storage.row_partitions(stored)
    assert [(p.start, p.n_rows) for p in parts] == [(0, 40), (40, 40), (80, 20)]
    expected = _clipped(rows, DomainSpec(radius=10.0))
    assert np.concatenate([p.read() for p in parts]).tobytes() == expected.tobytes()
    # No copy of the rows stays on the API's disk.
    local = (
        list(get_settings().datasets_dir.glob("*")) if get_settings().datasets_dir.exists() else []
    )
    assert local == []

    r = s3_client.delete(f"/v1/datasets/{ds['id']}", headers=auth(keys["owner"]))
    assert r.status_code == 200
    assert s3.object_keys("datasets/") == []


def test_an_import_from_s3_into_s3_storage(s3_client: TestClient, keys: dict, s3: FakeS3) -> None:
    rows = _rows(90, 4)
    _write_parquet(s3.url("lake", "table.parquet"), rows)
    accepted = _import(s3_client, keys["owner"], s3.url("lake", "table.parquet"))
    assert accepted["status"] == 202, accepted
    dataset_id = accepted["body"]["id"]
    assert _run(dataset_id) == "ready"
    ready = _get(s3_client, keys["owner"], dataset_id)
    assert (ready["n_rows"], ready["columns"]) == (90, COLUMNS)
    assert [e["kind"] for e in _ledger(s3_client, keys["owner"], dataset_id)] == ["cap", "count"]
    stored = _stored(get_settings(), dataset_id)
    assert stored is not None and storage.is_remote(stored)
    expected = _clipped(rows, DomainSpec(radius=10.0))
    assert storage.read_all(stored).tobytes() == expected.tobytes()
    assert len(storage.row_partitions(stored)) == 3

    # A job runs on rows that live in object storage only.
    from worker.tasks import run_clustering_job

    job = s3_client.post(
        f"/v1/datasets/{dataset_id}/jobs", headers=auth(keys["analyst"]), json={"k": 2, "mu": 0.3}
    )
    assert job.status_code == 202, job.text
    assert run_clustering_job(job.json()["id"]) == "succeeded"


@pytest.mark.parametrize(
    ("source", "status"),
    [
        ("{tmp}/elsewhere/a.parquet", 403),  # outside the allow-list
        ("{lake}-secret/a.parquet", 403),  # a prefix counts whole segments
        ("{lake}/../elsewhere/a.parquet", 422),  # `..`
        ("{lake}/escape", 403),  # a symlink that resolves outside
        ("{tmp}/data/datasets", 403),  # the service's own storage
        ("s3://bucket/anything", 403),
        ("lake/a.parquet", 422),  # relative
        ("https://example.com/a.parquet", 422),
    ],
)
def test_sources_outside_the_allow_list_create_and_charge_nothing(
    client: TestClient,
    keys: dict,
    settings: Settings,
    lake: Path,
    tmp_path: Path,
    source: str,
    status: int,
) -> None:
    (tmp_path / "elsewhere").mkdir()
    _write_parquet(tmp_path / "elsewhere" / "a.parquet", _rows(10, 5))
    lake.mkdir(exist_ok=True)
    (lake / "escape").symlink_to(tmp_path / "elsewhere")
    refused = _import(client, keys["owner"], source.format(tmp=tmp_path, lake=lake))
    assert refused["status"] == status, refused
    code = "import-source-forbidden" if status == 403 else "invalid-parameter"
    assert refused["body"]["code"] == code
    _nothing_created(client, keys, settings)


def test_a_request_needs_exactly_one_of_file_and_source(
    client: TestClient, keys: dict, settings: Settings, lake: Path
) -> None:
    neither = _import(client, keys["owner"], "")
    both = upload(client, keys["owner"], csv_bytes(_rows(5, 6), COLUMNS), source=str(lake))
    for refused in (neither, both):
        assert refused["status"] == 422 and refused["body"]["field"] == "file", refused
    _nothing_created(client, keys, settings)


def test_imports_are_off_without_prefixes(
    client: TestClient, keys: dict, settings: Settings, lake: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PRIVCLUST_IMPORT_SOURCES", "")
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(get_settings())) as off:
        refused = _import(off, keys["owner"], str(lake))
    assert refused["status"] == 403 and "off" in refused["body"]["detail"]
    _nothing_created(client, keys, settings)


@pytest.mark.parametrize(
    ("columns", "reason"),
    [
        ({"x": [1.0, 12345.678, float("nan")], "y": [0.0, 1.0, 2.0]}, "row 3 (counted"),
        ({"x": [1.0, 12345.678, None], "y": [0.0, 1.0, 2.0]}, "missing (null)"),
        ({"x": ["12345.678", "b", "c"], "y": [0.0, 1.0, 2.0]}, "only numeric"),
    ],
)
def test_an_import_of_bad_data_fails_with_a_reason_that_names_no_value(
    client: TestClient,
    keys: dict,
    settings: Settings,
    lake: Path,
    columns: dict,
    reason: str,
) -> None:
    lake.mkdir()
    pq.write_table(pa.table(columns), lake / "bad.parquet")
    ds = _import(client, keys["owner"], str(lake))["body"]
    assert _run(ds["id"]) == "failed"
    failed = _get(client, keys["owner"], ds["id"])
    assert failed["status"] == "failed" and reason in failed["failure_reason"]
    assert "'x'" in failed["failure_reason"] and "12345" not in failed["failure_reason"]
    assert _get(client, keys["analyst"], ds["id"])["failure_reason"] is None
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap"]
    assert _stored(settings, ds["id"]) is None
    assert list(settings.datasets_dir.glob("*.npy*")) == []


def test_a_missing_source_or_a_domain_that_does_not_fit_fails(
    client: TestClient, keys: dict, lake: Path
) -> None:
    _write_parquet(lake / "t.parquet", _rows(10, 7))
    gone = _import(client, keys["owner"], f"{lake}/absent.parquet")["body"]
    misfit = _import(client, keys["owner"], str(lake), center="0,0,0")["body"]
    assert _run(gone["id"]) == _run(misfit["id"]) == "failed"
    assert "does not exist" in _get(client, keys["owner"], gone["id"])["failure_reason"]
    assert "3 values" in _get(client, keys["owner"], misfit["id"])["failure_reason"]


def test_nothing_runs_on_a_dataset_that_is_not_ready(
    client: TestClient, keys: dict, lake: Path
) -> None:
    _write_parquet(lake / "t.parquet", _rows(50, 8))
    ds = _import(client, keys["owner"], str(lake))["body"]
    analyst = auth(keys["analyst"])
    url = f"/v1/datasets/{ds['id']}"
    for path, body in [
        ("/jobs", {"k": 2, "epsilon": 1}),
        ("/jobs/estimate", {"k": 2, "epsilon": 1}),
        ("/sweeps", {"ks": [2, 3], "epsilon": 1}),
        ("/sweeps/estimate", {"ks": [2, 3], "epsilon": 1}),
    ]:
        r = client.post(url + path, headers=analyst, json=body)
        assert r.status_code == 409 and r.json()["code"] == "dataset-not-ready", (path, r.text)
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap"]

    # Deleted while it waits: the worker finds it failed and writes nothing.
    assert client.delete(url, headers=auth(keys["owner"])).status_code == 200
    assert _run(ds["id"]) == "failed"
    gone = _get(client, keys["owner"], ds["id"])
    assert gone["status"] == "failed" and "deleted" in gone["failure_reason"]
    r = client.post(url + "/jobs", headers=analyst, json={"k": 2, "epsilon": 1})
    assert r.status_code == 409


def test_a_store_that_is_down_refuses_uploads_and_fails_imports(
    s3_client: TestClient, keys: dict, s3: FakeS3, lake: Path, monkeypatch
) -> None:
    _write_parquet(lake / "t.parquet", _rows(30, 9))
    waiting = _import(s3_client, keys["owner"], str(lake))["body"]
    s3.stop()
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no retries: the test need not wait for them
    up = upload(s3_client, keys["owner"], csv_bytes(_rows(30, 10), COLUMNS), radius="10")
    assert up["status"] == 503 and up["body"]["code"] == "storage-unavailable", up
    items = s3_client.get("/v1/datasets", headers=auth(keys["owner"])).json()["items"]
    assert [d["id"] for d in items] == [waiting["id"]]  # the upload created nothing

    assert _run(waiting["id"]) == "failed"
    failed = _get(s3_client, keys["owner"], waiting["id"])
    assert "object storage could not be reached" in failed["failure_reason"]
    assert [e["kind"] for e in _ledger(s3_client, keys["owner"], waiting["id"])] == ["cap"]


def test_a_retry_after_the_charge_never_draws_a_second_count(
    client: TestClient, keys: dict, settings: Settings, lake: Path, monkeypatch
) -> None:
    _write_parquet(lake / "t.parquet", _rows(30, 11))
    ds = _import(client, keys["owner"], str(lake))["body"]
    draws = []

    def crash(n_rows: int, mu: float, rng: Any = None) -> int:
        draws.append(n_rows)
        raise RuntimeError("the worker died while drawing the count")

    monkeypatch.setattr(noise, "release_count", crash)
    with pytest.raises(RuntimeError):
        _run(ds["id"])
    # Charged, not released; the retry finds it charged and draws nothing.
    assert _run(ds["id"]) == "importing"
    assert draws == [30]
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap", "count"]

    # The sweep fails it, charged, with no count ever released.
    monkeypatch.setattr(imports, "STALE_IMPORT_SECONDS", 0.0)
    monkeypatch.setattr(settings, "stale_job_seconds", 0.0)
    imports.sweep_imports(settings, session_factory(settings.resolved_database_url))
    swept = _get(client, keys["owner"], ds["id"])
    assert swept["status"] == "failed" and swept["n_rows_dp"] is None
    assert "after the row count was charged" in swept["failure_reason"]
    assert [e["kind"] for e in _ledger(client, keys["owner"], ds["id"])] == ["cap", "count"]
    assert _run(ds["id"]) == "failed" and draws == [30]


def test_the_worker_takes_an_import_from_the_queue(
    client: TestClient, keys: dict, settings: Settings, lake: Path
) -> None:

    _write_parquet(lake / "t.parquet", _rows(20, 12))
    ds = _import(client, keys["owner"], str(lake))["body"]
    run_tasks_here(settings, max_jobs=1)
    assert _get(client, keys["owner"], ds["id"])["status"] == "ready"


def test_an_import_whose_queue_entry_was_lost_is_enqueued_again(
    client: TestClient, keys: dict, settings: Settings, lake: Path, monkeypatch
) -> None:
    from redis import Redis
    from rq.job import Job as RqJob

    _write_parquet(lake / "t.parquet", _rows(20, 13))
    ds = _import(client, keys["owner"], str(lake))["body"]
    conn = Redis.from_url(settings.redis_url or "")
    job_id = imports.rq_job_id(uuid.UUID(ds["id"]))
    RqJob.fetch(job_id, connection=conn).delete()  # Redis lost it (a restart without its data)
    monkeypatch.setattr(settings, "stale_job_seconds", 0.0)
    imports.sweep_imports(settings, session_factory(settings.resolved_database_url))
    assert RqJob.exists(job_id, connection=conn)
    assert _run(ds["id"]) == "ready"
