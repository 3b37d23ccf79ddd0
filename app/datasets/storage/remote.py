"""Rows in object storage: Parquet partitions any worker can read, whatever its host.

A dataset's rows are `<storage url>/<id hex>/part-NNNNN.parquet`, each file one row group of at
most `partition_rows` rows (fewer for wide tables: a partition is buffered in memory while it is
written, so it is capped at PARTITION_BYTES too), float64 columns named c0..c{d-1}, written
without statistics (no column's minimum or maximum is kept anywhere) and zstd-compressed.
`_rows.json`, written last, lists the parts and their row counts: its presence is what makes
the rows complete, and it lets a reader plan the partitions without opening every file.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.datasets.storage import pending
from app.datasets.storage.location import filesystem, is_remote, join, reaching
from app.datasets.storage.writer import RowClip, RowsWriter

MANIFEST = "_rows.json"
FORMAT = "privclust-rows/1"
PARTITION_BYTES = 128 << 20  # 1,048,576 rows of 16 columns
_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 1,
    "use_dictionary": False,
    "write_statistics": False,
}
_UPLOAD_BLOCK_BYTES = 16 << 20  # s3fs multipart upload part size
_INTERLEAVE_ROWS = 1 << 14  # rows per block when columns are interleaved into rows (2 MiB of 16)

log = logging.getLogger("privclust.storage")


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def column_names(n_cols: int) -> list[str]:
    return [f"c{j}" for j in range(n_cols)]


class ParquetRowsWriter(RowsWriter):
    """Buffers rows column by column into a partition, writes each full one as a Parquet file
    of one row group, and the manifest on `commit`. Nothing stays on the local disk."""

    def __init__(
        self,
        base_url: str,
        name: str,
        partition_rows: int,
        clip: RowClip | None = None,
        scratch: Path | None = None,
    ) -> None:
        super().__init__(join(base_url, name), clip)
        self._scratch = scratch  # where a delete that failed is recorded (storage.pending)
        self._partition_rows = partition_rows
        self._fs = filesystem(base_url)
        self._buffer: npt.NDArray[np.float64] | None = None
        self._fill = 0
        self._parts: list[int] = []  # rows in each part written
        self._touched = False

    def _open(self, n_cols: int) -> None:
        rows = max(1, min(self._partition_rows, PARTITION_BYTES // (8 * n_cols)))
        self._buffer = np.empty((n_cols, rows), dtype=np.float64)  # one row per column

    def _write(self, data: npt.NDArray[np.float64]) -> None:
        assert self._buffer is not None
        capacity = self._buffer.shape[1]
        done = 0
        while done < data.shape[0]:
            take = min(data.shape[0] - done, capacity - self._fill)
            self._buffer[:, self._fill : self._fill + take] = data[done : done + take].T
            self._fill += take
            done += take
            if self._fill == capacity:
                self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert self._buffer is not None and self.n_cols is not None
        n = self._fill
        table = pa.Table.from_arrays(
            [pa.array(self._buffer[j, :n]) for j in range(self.n_cols)],
            schema=_schema(self.n_cols),
        )
        url = join(self.stored, part_name(len(self._parts)))
        self._touched = True
        with (
            reaching(url, "storing the rows"),
            self._fs.open(url, "wb", block_size=_UPLOAD_BLOCK_BYTES) as f,
        ):
            pq.write_table(table, f, row_group_size=n, **_WRITE_OPTIONS)
        self._parts.append(n)
        self._fill = 0

    def commit(self) -> None:
        assert self.n_cols is not None
        if self._fill:
            self._flush()
        manifest = {
            "format": FORMAT,
            "n_rows": self.n_rows,
            "n_cols": self.n_cols,
            "parts": [{"name": part_name(i), "n_rows": n} for i, n in enumerate(self._parts)],
        }
        url = join(self.stored, MANIFEST)
        with reaching(url, "storing the rows"), self._fs.open(url, "w") as f:
            f.write(json.dumps(manifest))
        self._buffer = None

    def discard(self) -> None:
        """Delete what was written; if the store cannot be reached (the outage that failed
        the write, usually), record it for the orphan sweep to delete once it can."""
        self._buffer = None
        if self._touched:
            if not delete_prefix(self.stored) and self._scratch is not None:
                pending.remember(self._scratch, self.stored)
            self._touched = False


def _schema(n_cols: int) -> Any:
    import pyarrow as pa

    return pa.schema([pa.field(c, pa.float64(), nullable=False) for c in column_names(n_cols)])


@dataclass(frozen=True)
class Part:
    url: str
    n_rows: int
    start: int


def read_manifest(stored: str) -> tuple[int, list[Part]]:
    """(columns, the parts in row order) of complete stored rows; FileNotFoundError when the
    rows are gone (or were never completed)."""
    fs = filesystem(stored)
    with fs.open(join(stored, MANIFEST), "r") as f:
        manifest = json.loads(f.read())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{stored} holds rows of an unknown format {manifest.get('format')!r}")
    parts, start = [], 0
    for part in manifest["parts"]:
        parts.append(Part(join(stored, part["name"]), int(part["n_rows"]), start))
        start += int(part["n_rows"])
    if start != manifest["n_rows"]:
        raise ValueError(f"{stored}: its parts hold {start} rows, its manifest says otherwise")
    return int(manifest["n_cols"]), parts


def read_row_group(
    url: str, row_group: int, n_rows: int, n_cols: int, out: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.float64]:
    """One row group of a stored part as (n_rows, n_cols) float64 rows, into `out` if given.

    A local file is read by pyarrow itself, memory-mapped, and the columns are interleaved into
    rows a block at a time that stays in cache: 0.14-0.29 s for 1,048,576 x 16, where reading
    through a Python file object and copying a whole column at a time took 0.40-0.57 s."""
    import pyarrow.parquet as pq

    columns = column_names(n_cols)
    if is_remote(url):
        with filesystem(url).open(url, "rb") as f:
            table = pq.ParquetFile(f).read_row_group(row_group, columns=columns)
    else:
        table = pq.ParquetFile(url, memory_map=True).read_row_group(row_group, columns=columns)
    if table.num_rows != n_rows:
        raise ValueError(f"{url} row group {row_group} holds {table.num_rows} rows, not {n_rows}")
    rows = np.empty((n_rows, n_cols), dtype=np.float64) if out is None else out
    values = [table.column(j).to_numpy() for j in range(n_cols)]
    for start in range(0, n_rows, _INTERLEAVE_ROWS):
        block = rows[start : start + _INTERLEAVE_ROWS]
        for j, column in enumerate(values):
            block[:, j] = column[start : start + _INTERLEAVE_ROWS]
    return rows


def read_row_group_rows(
    url: str, row_group: int, skip: int, n_rows: int, n_cols: int
) -> npt.NDArray[np.float64]:
    """Rows `skip` to `skip + n_rows` of one row group of a stored part, as (n_rows, n_cols)
    float64 rows. The group is decoded in batches of _INTERLEAVE_ROWS rows and only the rows
    asked for are kept, so reading a piece of a group holds the piece and one batch, never the
    whole group (a partition split to fit a worker's memory: app.kit.cluster)."""
    import pyarrow.parquet as pq

    columns = column_names(n_cols)
    rows = np.empty((n_rows, n_cols), dtype=np.float64)
    with contextlib.ExitStack() as stack:
        if is_remote(url):
            source: Any = stack.enter_context(filesystem(url).open(url, "rb"))
            parquet = pq.ParquetFile(source)
        else:
            parquet = pq.ParquetFile(url, memory_map=True)
        at, filled = 0, 0  # the batch's first row in the group; rows written
        for batch in parquet.iter_batches(
            batch_size=_INTERLEAVE_ROWS, row_groups=[row_group], columns=columns
        ):
            lo, hi = max(skip, at), min(skip + n_rows, at + batch.num_rows)
            if lo < hi:
                block = rows[lo - skip : hi - skip]
                for j in range(n_cols):
                    block[:, j] = batch.column(j).to_numpy()[lo - at : hi - at]
                filled += hi - lo
            at += batch.num_rows
            if at >= skip + n_rows:
                break
    if filled != n_rows:
        raise ValueError(f"{url} row group {row_group} holds fewer than {skip + n_rows} rows")
    return rows


def delete_prefix(stored: str) -> bool:
    """Remove every object of stored rows: whether they are gone. A store that cannot be
    reached is logged (the orphan sweep removes them later), never raised: the dataset no
    longer refers to them."""
    fs = filesystem(stored)
    try:
        fs.rm(stored, recursive=True)
    except FileNotFoundError:
        pass
    except Exception as exc:  # any transport error: logged, and the orphan sweep retries
        log.warning("could not delete %s (%s); the orphan sweep will retry", stored, exc)
        return False
    return True
