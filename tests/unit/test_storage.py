"""Stored rows, local and in object storage (a fake S3: moto's server over real HTTP): what is
written comes back bit for bit, whole or as partitions in row order that any process can read;
Parquet partitions are row groups of at most partition_rows rows; deleting removes every
object; a store that is down is reported as such."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.datasets import storage
from app.datasets.domain import DomainClip, DomainSpec
from app.kit.errors import StorageUnavailable
from tests.support.s3 import FakeS3


def _awkward_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Rows whose every bit matters: signed zeros, subnormals, huge and tiny values."""
    rows = np.random.default_rng(seed).normal(0.0, 1.0, (n, d))
    rows[0, 0], rows[1, 0] = -0.0, 5e-324
    rows[2, : min(d, 2)] = [1e300, -1e-300][: min(d, 2)]
    return rows


def _write(where: str, rows: np.ndarray, partition_rows: int, block: int, name: str) -> str:
    writer = storage.new_rows_writer(where, name, partition_rows=partition_rows)
    writer.start(rows.shape[1])
    for start in range(0, len(rows), block):
        writer.append(rows[start : start + block].copy())
    writer.commit()
    assert writer.n_rows == len(rows)
    return writer.stored


def _check_partitions(stored: str, rows: np.ndarray, partition_rows: int) -> None:
    parts = storage.row_partitions(stored, partition_rows)
    assert [p.start for p in parts] == list(range(0, len(rows), partition_rows))
    assert all(p.n_rows <= partition_rows and p.n_cols == rows.shape[1] for p in parts)
    for part in parts:
        # What another process (a Dask worker) gets: the pickled description, read there.
        copy = pickle.loads(pickle.dumps(part))
        block = copy.read()
        assert block.dtype == np.float64 and block.flags.c_contiguous
        assert block.tobytes() == rows[part.start : part.start + part.n_rows].tobytes()
        # Split to fit a worker's memory (app.kit.cluster): the same rows, piece by piece.
        pieces = [pickle.loads(pickle.dumps(piece)) for piece in part.split(3)]
        assert all(0 < piece.n_rows <= 3 for piece in pieces)
        assert sum(piece.n_rows for piece in pieces) == part.n_rows
        assert len(pieces) == -(-part.n_rows // 3)
        assert np.concatenate([piece.read() for piece in pieces]).tobytes() == block.tobytes()
        starts = [part.start + sum(q.n_rows for q in pieces[:i]) for i in range(len(pieces))]
        assert [piece.start for piece in pieces] == starts
    whole = storage.read_all(stored)
    assert whole.shape == rows.shape and whole.tobytes() == rows.tobytes()
    assert not whole.flags.writeable


def test_local_rows_come_back_bit_for_bit_in_row_ranges(tmp_path: Path) -> None:
    rows = _awkward_rows(103, 3)
    stored = _write(str(tmp_path), rows, partition_rows=10, block=17, name="a" * 32)
    assert stored == str(tmp_path / f"{'a' * 32}.npy")
    _check_partitions(stored, rows, 10)
    assert isinstance(storage.read_all(stored), np.memmap)  # the fast path: a memory map
    np.testing.assert_array_equal(storage.open_rows(stored), rows)
    storage.delete_rows(stored)
    with pytest.raises(FileNotFoundError):
        storage.row_partitions(stored)
    with pytest.raises(FileNotFoundError):
        storage.read_all(None)


def test_s3_rows_are_parquet_row_groups_that_come_back_bit_for_bit(s3: FakeS3) -> None:
    rows = _awkward_rows(103, 3, seed=1)
    stored = _write(s3.url("datasets"), rows, partition_rows=10, block=17, name="b" * 32)
    assert stored == s3.url("datasets", "b" * 32)
    keys = s3.object_keys(f"datasets/{'b' * 32}/")
    parts = [k for k in keys if k.endswith(".parquet")]
    assert parts == [f"datasets/{'b' * 32}/part-{i:05d}.parquet" for i in range(11)]
    assert keys == sorted([*parts, f"datasets/{'b' * 32}/_rows.json"])
    body = s3.client().get_object(Bucket=s3.bucket, Key=parts[0])["Body"].read()
    first = pq.ParquetFile(io.BytesIO(body))
    assert first.metadata.num_row_groups == 1 and first.metadata.num_rows == 10
    assert first.schema_arrow.names == ["c0", "c1", "c2"]
    assert first.metadata.row_group(0).column(0).statistics is None  # no min/max kept
    _check_partitions(stored, rows, 10)

    storage.delete_rows(stored)
    assert s3.object_keys("datasets/") == []
    with pytest.raises(FileNotFoundError):
        storage.row_partitions(stored)


def test_a_row_group_split_into_pieces_reads_each_piece_bit_for_bit(tmp_path: Path) -> None:
    """Pieces of one Parquet row group larger than a decoding batch (16,384 rows), local."""
    from app.datasets.storage.remote import column_names
    from app.datasets.storage.rows import RowPartition

    rows = _awkward_rows(40_000, 2, seed=2)
    path = tmp_path / "part-00000.parquet"
    table = {name: rows[:, j] for j, name in enumerate(column_names(2))}
    pq.write_table(pa.table(table), path, row_group_size=len(rows))
    whole = RowPartition(str(path), len(rows), 2, 0, 0)
    for most in (15_000, 16_384, 39_999):
        pieces = whole.split(most)
        assert len(pieces) == -(-len(rows) // most)
        read = [pickle.loads(pickle.dumps(piece)).read() for piece in pieces]
        assert np.concatenate(read).tobytes() == rows.tobytes()
    assert whole.split(len(rows)) == [whole]
    # A piece of a piece reads its own rows.
    inner = whole.split(15_000)[1].split(5_000)[2]
    assert inner.read().tobytes() == rows[inner.start : inner.start + inner.n_rows].tobytes()
    with pytest.raises(ValueError):
        whole.split(0)


def test_a_wide_table_gets_partitions_bounded_in_bytes(
    s3: FakeS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage.remote, "PARTITION_BYTES", 8 * 4 * 6)  # 6 rows of 4 columns
    rows = _awkward_rows(20, 4, seed=2)
    stored = _write(s3.url("wide"), rows, partition_rows=1000, block=20, name="c" * 32)
    manifest = json.loads(
        s3.client().get_object(Bucket=s3.bucket, Key=f"wide/{'c' * 32}/_rows.json")["Body"].read()
    )
    assert [p["n_rows"] for p in manifest["parts"]] == [6, 6, 6, 2]
    assert storage.read_all(stored).tobytes() == rows.tobytes()


def test_rows_are_clipped_before_they_are_written(s3: FakeS3) -> None:
    rows = np.array([[0.5, 0.5], [30.0, 40.0], [-2.0, 0.1]])
    clip = DomainClip(DomainSpec(lower=[-1.0, 0.0], upper=[1.0, 1.0]))
    writer = storage.new_rows_writer(s3.url("clip"), "d" * 32, partition_rows=2, clip=clip)
    writer.start(2)
    writer.append(rows.copy())
    writer.commit()
    stored = storage.read_all(writer.stored)
    assert (stored >= [-1.0, 0.0]).all() and (stored <= [1.0, 1.0]).all()
    assert stored[0].tolist() == [0.5, 0.5]  # inside: untouched


def test_a_discarded_write_leaves_no_object(s3: FakeS3) -> None:
    writer = storage.new_rows_writer(s3.url("gone"), "e" * 32, partition_rows=2)
    writer.start(1)
    writer.append(np.arange(5.0).reshape(5, 1))
    assert s3.object_keys("gone/")  # two full partitions written already
    writer.discard()
    assert s3.object_keys("gone/") == []


def test_a_store_that_is_down_is_reported_as_unavailable(
    s3: FakeS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.stop()
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no retries: the test need not wait for them
    writer = storage.new_rows_writer(s3.url("down"), "f" * 32, partition_rows=2)
    writer.start(1)
    with pytest.raises(StorageUnavailable) as refused:
        writer.append(np.arange(5.0).reshape(5, 1))
    assert refused.value.status == 503 and refused.value.code == "storage-unavailable"
    writer.discard()  # cannot reach the store either: logged, not raised


def test_remote_orphans_are_removed_once_stale_and_unreferenced(s3: FakeS3) -> None:
    base = s3.url("sweep")
    kept = _write(base, np.ones((3, 1)), 2, 3, "1" * 32)
    orphan = _write(base, np.ones((3, 1)), 2, 3, "2" * 32)
    referenced = {storage.stored_name(kept)}
    assert storage.remove_orphaned_rows(base, lambda: referenced) == []  # fresh
    removed = storage.remove_orphaned_rows(base, lambda: referenced, stale_after=0.0)
    assert [r.path for r in removed] == [orphan]
    assert s3.object_keys("sweep/") == sorted(s3.object_keys(f"sweep/{'1' * 32}/"))
