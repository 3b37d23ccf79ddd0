"""An import's source: a Parquet file or a folder of them, local or in object storage, read in
row batches into a `RowsWriter` with the checks an upload gets.

Memory stays bounded whatever the source's size: one batch of about BATCH_BYTES of values at a
time, read through a small block cache (remote) or the page cache (local). Errors name the
file, row and column at fault, never a value: an import's failure reason is stored and shown.
Files of a folder are read in path order; names that start with `.` or `_` (Spark's
`_SUCCESS`, checksums) and files without a Parquet suffix are skipped, as pyarrow's datasets do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.ingest.checks import check_finite, select_columns
from app.datasets.ingest.parquet import check_numeric, convert_batch
from app.datasets.storage import RowsWriter
from app.datasets.storage.location import filesystem, is_remote
from app.kit.errors import UploadError

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
BATCH_BYTES = 2 << 20
_READ_BUFFER_BYTES = 1 << 20
# A remote file is read through a cache of blocks: one stream per column chunk, each reading
# ahead in its own block, so at most 64 x 2 MiB are held.
_REMOTE_OPEN: dict[str, Any] = {
    "block_size": 2 << 20,
    "cache_type": "blockcache",
    "cache_options": {"maxblocks": 64},
}

Progress = Callable[[float], None]


@dataclass(frozen=True)
class SourceFile:
    url: str
    name: str  # as errors show it: the path below the source (the file's name for a file)
    size: int


def list_files(source: str) -> list[SourceFile]:
    """The Parquet files of `source` (a file, or a folder searched recursively), in path
    order; UploadError if there are none. FileNotFoundError if it does not exist."""
    fs = filesystem(source)
    root = fs._strip_protocol(source)
    info = fs.info(root)
    if info["type"] != "directory":
        return [SourceFile(source, root.rsplit("/", 1)[-1], int(info.get("size") or 0))]
    found = fs.find(root, detail=True, withdirs=False)
    files = []
    for path in sorted(found):
        below = path[len(root) :].lstrip("/")
        if any(part.startswith((".", "_")) for part in below.split("/")):
            continue
        if not below.lower().endswith(PARQUET_SUFFIXES):
            continue
        url = ("s3://" + path) if is_remote(source) else path
        files.append(SourceFile(url, below, int(found[path].get("size") or 0)))
    if not files:
        raise UploadError(
            "The source folder holds no Parquet files (names ending in .parquet, .pq or .parq).",
            code="empty-dataset",
        )
    return files


def import_parquet(
    files: list[SourceFile],
    wanted: list[str] | None,
    writer: RowsWriter,
    progress: Progress,
    check_file: Callable[[str], None] = lambda url: None,
) -> list[str]:
    """Read every file's kept columns into `writer` (started with the first file's schema),
    reporting the fraction of the source's bytes read to `progress` after each batch; return
    the kept columns' names. `check_file(url)` is called before a file is opened."""
    total = sum(f.size for f in files) or 1
    done = 0
    selected: list[str] | None = None
    for file in files:
        check_file(file.url)
        with _opened(file) as parquet:
            schema = parquet.schema_arrow
            if selected is None:
                selected = select_columns(list(schema.names), wanted)
                check_numeric(schema, selected, _in(file))
                writer.start(len(selected))
            else:
                _check_same_columns(file, schema, selected)
            n_rows = parquet.metadata.num_rows
            for read in _read_batches(file, parquet, selected, writer):
                progress((done + file.size * read / max(n_rows, 1)) / total)
        done += file.size
        progress(done / total)
    if selected is None or writer.n_rows == 0:
        raise UploadError("The source has no rows.", code="empty-dataset")
    return selected


def _in(file: SourceFile) -> str:
    return f"In {file.name}: "


class _opened:
    """A source file opened as a ParquetFile, closed on exit; unreadable: UploadError."""

    def __init__(self, file: SourceFile) -> None:
        self.file = file
        fs = filesystem(file.url)
        options = _REMOTE_OPEN if is_remote(file.url) else {}
        self.handle = fs.open(file.url, "rb", **options)

    def __enter__(self) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(self.handle, pre_buffer=False, buffer_size=_READ_BUFFER_BYTES)
        except (pa.ArrowException, ValueError) as exc:
            self.handle.close()
            detail = str(exc)[:200]
            raise UploadError(
                f"{self.file.name} is not a readable Parquet file ({detail})."
            ) from None

    def __exit__(self, *exc_info: object) -> None:
        self.handle.close()


# A source file opened as a ParquetFile (a context manager), for app.datasets.ingest.tabular.
opened_source = _opened


def _check_same_columns(file: SourceFile, schema: pa.Schema, selected: list[str]) -> None:
    missing = [c for c in selected if c not in schema.names]
    if missing:
        raise UploadError(
            f"{file.name} has no column {missing[0]!r}; every file of the source needs the "
            "dataset's columns.",
            column=missing[0],
        )
    check_numeric(schema, selected, _in(file))


def _read_batches(
    file: SourceFile, parquet: pq.ParquetFile, selected: list[str], writer: RowsWriter
) -> Any:
    """Convert, check and write the file's rows batch by batch; yield the rows read so far."""
    step = max(1, BATCH_BYTES // (8 * len(selected)))

    def where(row: int) -> str:
        return f"{file.name}, row {row} (counted from 1)"

    first = 1
    try:
        for batch in parquet.iter_batches(batch_size=step, columns=selected):
            block = convert_batch(batch, selected, first, where)
            check_finite(block, first, selected, where)
            writer.append(block)
            first += batch.num_rows
            yield first - 1
    except pa.ArrowException as exc:
        # The type only: a decoding error's message may quote what it could not decode.
        raise UploadError(f"{file.name} cannot be read ({type(exc).__name__}).") from None
