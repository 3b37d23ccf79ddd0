"""A dataset's stored rows as the rest of the code reads them: whole, or in partitions.

Whatever the store, rows come back as float64 values bit for bit as they were stored (clipped
at ingest). A `RowPartition` is a small picklable description of one block of rows that any
process can read (the RQ worker, or a Dask worker on another host that has the same storage
settings), so a partitioned pass can send partitions, never arrays.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.datasets.storage import local, remote
from app.datasets.storage.location import filesystem, is_remote

DEFAULT_PARTITION_ROWS = 1 << 20


@dataclass(frozen=True)
class RowPartition:
    """One block of a dataset's stored, clipped rows that any process can read: the RQ worker,
    or a Dask worker on another host (it is pickled and sent there)."""

    url: str  # a local path or an s3:// URL
    n_rows: int
    n_cols: int
    start: int = 0  # first row (.npy: row offset into the matrix)
    row_group: int | None = None  # Parquet: which row group of `url`
    # Parquet: a piece of the row group (`split`), from its row `skip`; None: the whole group.
    skip: int | None = None

    def read(self) -> npt.NDArray[np.float64]:
        """The partition's rows: float64, C-contiguous, shape (n_rows, n_cols)."""
        if self.row_group is None:
            return local.read_npy_rows(self.url, self.start, self.n_rows, self.n_cols)
        if self.skip is not None:
            return remote.read_row_group_rows(
                self.url, self.row_group, self.skip, self.n_rows, self.n_cols
            )
        return remote.read_row_group(self.url, self.row_group, self.n_rows, self.n_cols)

    def split(self, most_rows: int) -> list[RowPartition]:
        """This partition as consecutive pieces of at most `most_rows` rows each (as equal as
        can be), in row order: a task reads one piece, and holds only its rows."""
        if most_rows < 1:
            raise ValueError("a partition's piece holds at least one row")
        pieces = -(-self.n_rows // most_rows)
        if pieces <= 1:
            return [self]
        bounds = [self.n_rows * i // pieces for i in range(pieces + 1)]
        first = 0 if self.skip is None else self.skip
        return [
            replace(
                self,
                n_rows=b - a,
                start=self.start + a,
                skip=None if self.row_group is None else first + a,
            )
            for a, b in itertools.pairwise(bounds)
        ]


def row_partitions(
    stored: str | None, partition_rows: int = DEFAULT_PARTITION_ROWS
) -> list[RowPartition]:
    """The dataset's `storage_path` -> its partitions in row order. A local .npy is cut into
    row ranges of `partition_rows`; Parquet partitions are its stored row groups.
    OSError (FileNotFoundError) if the rows are gone."""
    stored = _present(stored)
    if is_remote(stored):
        n_cols, parts = remote.read_manifest(stored)
        return [RowPartition(p.url, p.n_rows, n_cols, p.start, 0) for p in parts]
    if partition_rows < 1:
        raise ValueError("partition_rows must be at least 1")
    n_rows, n_cols = local.npy_shape(stored)
    return [
        RowPartition(stored, min(partition_rows, n_rows - start), n_cols, start)
        for start in range(0, n_rows, partition_rows)
    ]


def check_readable(partitions: Sequence[RowPartition]) -> None:
    """Stat every file or object the partitions read, once each, asking the store itself (no
    cached listing): a job checks its rows this way before it is charged, so that a store that
    is down fails it refunded. Raises as reading would (OSError, or the store's own transport
    error)."""
    for url in sorted({p.url for p in partitions}):
        if is_remote(url):
            filesystem(url).info(url, refresh=True)
        else:
            Path(url).stat()


def read_all(stored: str | None) -> npt.NDArray[np.float64]:
    """Every row, float64 (N, d): for a local .npy the read-only memory map; from object
    storage, the partitions read into one array."""
    stored = _present(stored)
    if not is_remote(stored):
        return local.open_npy(stored)
    n_cols, parts = remote.read_manifest(stored)
    out = np.empty((sum(p.n_rows for p in parts), n_cols), dtype=np.float64)
    for p in parts:
        remote.read_row_group(p.url, 0, p.n_rows, n_cols, out[p.start : p.start + p.n_rows])
    out.flags.writeable = False  # as the memory map: rows are never changed once stored
    return out


def open_rows(stored: str | Path | None) -> npt.NDArray[np.float64]:
    """A dataset's stored rows: read-only, float64, (n_rows, n_cols) (`read_all`).

    `stored` is the dataset's `storage_path`; None (rows deleted) raises FileNotFoundError, and a
    file that is not a matrix written by the ingest raises ValueError."""
    return read_all(None if stored is None else str(stored))


def delete_rows(stored: str | Path | None) -> None:
    """Remove stored rows; rows already gone (or never stored: None) are not an error."""
    if stored is None:
        return
    if is_remote(str(stored)):
        remote.delete_prefix(str(stored))
    else:
        local.delete_npy(str(stored))


def _present(stored: str | None) -> str:
    if stored is None:
        raise FileNotFoundError("dataset rows were deleted")
    return stored
