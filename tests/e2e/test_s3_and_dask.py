"""The whole service on object storage and a Dask cluster, as real processes: `privclust api`
and `privclust worker` with PRIVCLUST_STORAGE_URL on a fake S3 (moto's server, a real HTTP
endpoint in this test process: tests/support/s3.py) and PRIVCLUST_DASK_SCHEDULER on a `dask
scheduler` with two `dask worker` processes. An upload streams into the store, an import by
reference copies a Parquet folder from it, every method's job runs its passes on the cluster,
and the owner's labels come back in row order; no row stays on the API's disk."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.api import uploaded, wait_for_job
from tests.support.dask import process_cluster
from tests.support.data import blobs_and_centres, csv_bytes
from tests.support.s3 import FakeS3, fake_s3
from tests.support.services import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

ALGORITHMS = ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]


@pytest.fixture
def lake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeS3, str]]:
    """A fake S3 and a Dask cluster that reaches it, exported for the stack's processes."""
    with fake_s3() as s3, process_cluster(env=s3.env) as (_, address):
        settings = {
            **s3.env,
            "PRIVCLUST_STORAGE_URL": s3.url("datasets"),
            "PRIVCLUST_IMPORT_SOURCES": s3.url("lake"),
            "PRIVCLUST_PARTITION_ROWS": "700",
            "PRIVCLUST_DASK_SCHEDULER": address,
        }
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        yield s3, address


def _partition_tasks(address: str) -> int:
    from dask.distributed import Client

    def count(dask_scheduler: object) -> int:
        prefix = dask_scheduler.task_prefixes.get("partition_total")  # type: ignore[attr-defined]
        return 0 if prefix is None else int(prefix.state_counts.get("memory", 0))

    with Client(address, timeout=30) as client:
        return int(client.run_on_scheduler(count))


def _put_parquet(s3: FakeS3, key: str, rows: np.ndarray) -> None:
    buffer = io.BytesIO()
    pq.write_table(pa.table({f"f{j}": rows[:, j] for j in range(rows.shape[1])}), buffer)
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=buffer.getvalue())


def test_the_service_on_s3_and_dask_end_to_end(
    lake: tuple[FakeS3, str], stack: Stack, tmp_path: Path
) -> None:
    s3, address = lake
    owner_key, analyst_key = stack.new_keys()
    rows, true_centres = blobs_and_centres(3000, 3, 3, seed=5, spread=0.3, half_width=5)
    _put_parquet(s3, "lake/export/part-0.parquet", rows[:1500])
    _put_parquet(s3, "lake/export/part-1.parquet", rows[1500:])
    with stack.client(owner_key) as owner, stack.client(analyst_key) as analyst:
        uploaded_ds = uploaded(
            owner, None, csv_bytes(rows, digits=6), name="up", epsilon=8, radius=12
        )
        assert uploaded_ds["status"] == "ready"
        stored = s3.object_keys(f"datasets/{uploaded_ds['id'].replace('-', '')}")
        assert any(k.endswith(".parquet") for k in stored), stored
        # With remote storage no copy of the rows stays on the API's disk.
        data_dir = Path(stack.env["PRIVCLUST_DATA_DIR"])
        assert not list(data_dir.rglob("*.npy")) and not list(data_dir.rglob("*.parquet"))

        r = owner.post(
            "/v1/datasets",
            data={
                "name": "lake",
                "epsilon": "8",
                "delta": "1e-6",
                "radius": "12",
                "source": s3.url("lake", "export"),
            },
        )
        assert r.status_code == 202, r.text
        assert r.json()["status"] == "importing"
        dataset_id = r.json()["id"]
        for _ in range(600):
            ds = owner.get(f"/v1/datasets/{dataset_id}").json()
            if ds["status"] != "importing":
                break
            time.sleep(0.1)
        assert ds["status"] == "ready", (ds, stack.logs())
        assert ds["n_rows"] == 3000

        before = _partition_tasks(address)
        for algorithm in ALGORITHMS:
            body = {"k": 3, "epsilon": 1.0, "algorithm": algorithm, "summaries": True}
            r = analyst.post(f"/v1/datasets/{dataset_id}/jobs", json=body)
            assert r.status_code == 202, r.text
            job = wait_for_job(analyst, r.json()["id"], {"succeeded", "failed"}, 180, stack.logs)
            assert job["status"] == "succeeded", (job, stack.logs())
            centres = np.array(job["result"]["centers"])
            gaps = np.linalg.norm(true_centres[:, None, :] - centres[None], axis=2).min(axis=1)
            # epsilon 1 on 3,000 rows of three blobs 0.3 wide: each found within 3 (a loose
            # bound that a run far from broken always meets).
            assert gaps.max() < 3.0, (algorithm, gaps)
        # 3,000 rows in partitions of 700: 5 tasks a pass, and every job made several passes.
        assert _partition_tasks(address) - before >= 5 * 2 * len(ALGORITHMS)

        labels = owner.get(f"/v1/jobs/{job['id']}/labels", params={"format": "npy"})
        assert labels.status_code == 200, labels.text
        got = np.load(io.BytesIO(labels.content))
        assert got.shape == (3000,) and set(np.unique(got)) <= {0, 1, 2}
