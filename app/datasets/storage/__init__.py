"""Where and how a dataset's rows are kept: the only package that knows their files.

`PRIVCLUST_STORAGE_URL` chooses the store (app.kit.config.Settings.resolved_storage_url):
- a local folder (the default: the data directory's `datasets`): each dataset is one
  memory-mapped float64 `.npy` (`local`), the fast path on one machine;
- `s3://bucket/prefix`: each dataset is float64 Parquet partitions in object storage
  (`remote`), readable by workers on any host.

A dataset row records where its rows are (its `storage_path`: a local path or an `s3://`
URL), and everything that touches them goes through here: writing a new dataset's rows, clipped
into its domain before they are stored (`new_rows_writer`), the scratch copy of an upload
(`spool_file`), reading them whole or in partitions (`read_all`, `row_partitions`,
`open_rows`), deleting them (`delete_rows`), and removing what a killed process left behind
(`remove_abandoned_rows`).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from app.datasets.storage.cleanup import (
    STALE_AFTER_SECONDS,
    RemovedFile,
    remove_abandoned_rows,
    remove_abandoned_uploads,
    remove_orphaned_rows,
    remove_stale_partial_uploads,
)
from app.datasets.storage.local import (
    DATASET_FILE,
    PARTIAL_UPLOAD_GLOB,
    NpyRowsWriter,
    check_name,
    spool_file,
)
from app.datasets.storage.location import is_remote, join, reaching
from app.datasets.storage.remote import ParquetRowsWriter
from app.datasets.storage.rows import (
    DEFAULT_PARTITION_ROWS,
    RowPartition,
    check_readable,
    delete_rows,
    open_rows,
    read_all,
    row_partitions,
)
from app.datasets.storage.writer import RowClip, RowsWriter

__all__ = [
    "DATASET_FILE",
    "DEFAULT_PARTITION_ROWS",
    "PARTIAL_UPLOAD_GLOB",
    "STALE_AFTER_SECONDS",
    "NpyRowsWriter",
    "ParquetRowsWriter",
    "RemovedFile",
    "RowClip",
    "RowPartition",
    "RowsWriter",
    "check_readable",
    "delete_rows",
    "is_remote",
    "new_rows_writer",
    "open_rows",
    "reaching",
    "read_all",
    "remove_abandoned_rows",
    "remove_abandoned_uploads",
    "remove_orphaned_rows",
    "remove_stale_partial_uploads",
    "row_partitions",
    "rows_location",
    "rows_name",
    "spool_file",
    "stored_name",
]


def rows_name(dataset_id: uuid.UUID) -> str:
    """The name a dataset's rows are stored under (what the orphan sweeps recognise)."""
    return dataset_id.hex


def stored_name(stored: str) -> str:
    """The file (or folder) name of stored rows (a dataset's `storage_path`), as the orphan
    sweeps' `referenced` gives it."""
    return stored.rstrip("/").rsplit("/", 1)[-1] if is_remote(stored) else Path(stored).name


def rows_location(storage_url: str, name: str) -> str:
    """Where a new dataset's rows named `name` will be (its `storage_path`), before they are."""
    check_name(name)
    if is_remote(storage_url):
        return join(storage_url, name)
    return str(Path(storage_url) / f"{name}.npy")


def new_rows_writer(
    storage_url: str,
    name: str,
    *,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    clip: RowClip | None = None,
    scratch: Path | None = None,
) -> RowsWriter:
    """A writer of a new dataset's rows named `name` in the store at `storage_url` (a local
    folder: a `.npy`; object storage: Parquet partitions of at most `partition_rows` rows,
    and `scratch`, the folder where rows it failed to delete are recorded for the sweep)."""
    check_name(name)
    if is_remote(storage_url):
        return ParquetRowsWriter(storage_url, name, partition_rows, clip, scratch)
    return NpyRowsWriter(Path(storage_url), name, clip)
