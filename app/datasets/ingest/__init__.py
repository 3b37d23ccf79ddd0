"""Dataset ingestion: stream an uploaded CSV, .npy or Parquet file into validated stored rows.

The upload is read in chunks (never whole), checked completely, and handed to a
`app.datasets.storage.RowsWriter`, which clips each block into the declared domain and stores it
(a float64 .npy, or Parquet partitions in object storage) for the worker to read. What is
written becomes the dataset's rows only once every value has been validated (`commit`), so a
rejected upload leaves nothing behind.

`ingest_file` sniffs the format and hands the upload to its module (csv, npy, parquet), each a
function of (upload, wanted columns, writer) returning the kept columns' names. Values are
stored as uploaded, clipped into the domain by the writer (none without a clip: tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from app.datasets.ingest.csv import ingest_csv
from app.datasets.ingest.early import adopt_early_rows
from app.datasets.ingest.npy import ingest_npy
from app.datasets.ingest.parquet import ingest_parquet
from app.datasets.ingest.reader import RowSink, Upload
from app.datasets.ingest.tabular import TableIngest, ingest_table
from app.datasets.storage import NpyRowsWriter, RowsWriter
from app.kit.errors import UploadError

__all__ = ["IngestedMatrix", "TableIngest", "ingest_file", "ingest_rows"]

_SNIFF_BYTES = 64 << 10
_NPY_MAGIC = b"\x93NUMPY"
_PARQUET_MAGIC = b"PAR1"
_NPY_SUFFIXES = (".npy",)
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_NPY_CONTENT_TYPES = ("application/x-npy", "application/npy")
_PARQUET_CONTENT_TYPES = (
    "application/vnd.apache.parquet",
    "application/x-parquet",
    "application/parquet",
)

Format = Literal["csv", "npy", "parquet"]
_FORMATS: dict[Format, Callable[[Upload, list[str] | None, RowSink], list[str]]] = {
    "csv": ingest_csv,
    "npy": ingest_npy,
    "parquet": ingest_parquet,
}


@dataclass(frozen=True)
class IngestedMatrix:
    """A validated dataset in storage: float64 rows of shape (n_rows, n_cols) at `stored`."""

    stored: str
    n_rows: int
    n_cols: int
    columns: list[str]

    @property
    def path(self) -> Path:
        """`stored` as a local path (local storage)."""
        return Path(self.stored)


def ingest_file(
    src: IO[bytes],
    *,
    filename: str | None,
    content_type: str | None,
    dest_dir: Path,
    columns: list[str] | None = None,
    max_bytes: int | None = None,
    name: str | None = None,
    writer: RowsWriter | None = None,
    table: TableIngest | None = None,
) -> IngestedMatrix:
    """Validate an uploaded dataset and store its rows with `writer` (default: a `.npy` named
    `dest_dir/<name>.npy`, unclipped). `dest_dir` also holds the scratch copy of an upload
    that needs one (removed when the ingest ends).

    `src` is read from its current position in chunks. The format is sniffed from the content
    (.npy and Parquet magic bytes), then taken from `filename`/`content_type`, else CSV.
    `columns` selects and orders the columns to keep; values of other columns are not checked.
    `max_bytes` caps the bytes read from `src` (UploadError `too-large`, status 413).
    `name` is the file stem (default: a fresh uuid4 hex); it must be a plain file-name token.
    `table`: gaps, categories or a privacy unit (app.datasets.ingest.tabular), never early.

    Raises UploadError (codes `invalid-file`, `non-numeric-value`, `non-finite-value`,
    `ragged-row`, `empty-dataset`, `too-large`) naming the row and column at fault where there
    is one; a domain that does not fit the file's width is an InvalidParameter. On any error
    nothing is left behind.
    """
    if writer is None:
        writer = NpyRowsWriter(dest_dir, uuid.uuid4().hex if name is None else name)
    if columns is not None and not all(isinstance(c, str) for c in columns):
        raise UploadError("`columns` must be a list of column names (strings)")
    try:
        # The rows of an early ingest (started while the upload arrived), if they fit.
        selected = adopt_early_rows(
            _adoptable(src, table),
            filename=filename,
            content_type=content_type,
            columns=columns,
            max_bytes=max_bytes,
            writer=writer,
        )
        if selected is None:
            selected = ingest_rows(
                src,
                filename=filename,
                content_type=content_type,
                dest_dir=dest_dir,
                columns=columns,
                max_bytes=max_bytes,
                writer=writer,
                table=table,
            )
        writer.commit()
    except BaseException:
        writer.discard()
        raise
    return IngestedMatrix(
        stored=writer.stored, n_rows=writer.n_rows, n_cols=len(selected), columns=list(selected)
    )


def _adoptable(src: IO[bytes], table: TableIngest | None) -> IO[bytes] | None:
    """`src`, whose early ingest may be adopted; None for a table with terms, whose early
    ingest (of plain numbers) is stopped: such a table is read and shaped from the start."""
    if table is None or table.spec.plain:
        return src
    early = getattr(src, "early", None)
    if early is not None:
        early.cancel()
    return None


def ingest_rows(
    src: IO[bytes],
    *,
    filename: str | None,
    content_type: str | None,
    dest_dir: Path,
    columns: list[str] | None,
    max_bytes: int | None,
    writer: RowSink,
    table: TableIngest | None = None,
) -> list[str]:
    """Sniff the format of `src` and convert its rows into `writer` (which is not committed);
    return the kept columns' names. The parameters and errors are `ingest_file`'s."""
    with Upload(src, max_bytes, dest_dir) as upload:
        prefix = upload.reader.peek(_SNIFF_BYTES)
        if not prefix:
            raise UploadError("The uploaded file is empty.", code="empty-dataset")
        fmt = _detect_format(prefix, filename, content_type)
        if table is not None and not table.spec.plain:
            selected = ingest_table(upload, fmt, columns, table, writer)
        else:
            selected = _FORMATS[fmt](upload, columns, writer)
    if writer.n_rows == 0:
        raise UploadError("The file has a header but no data rows.", code="empty-dataset")
    return selected


def _detect_format(prefix: bytes, filename: str | None, content_type: str | None) -> Format:
    if prefix.startswith(_NPY_MAGIC):
        return "npy"
    if prefix.startswith(_PARQUET_MAGIC):
        return "parquet"
    suffix = Path(filename).suffix.lower() if filename else ""
    mime = (content_type or "").split(";")[0].strip().lower()
    if suffix in _NPY_SUFFIXES or mime in _NPY_CONTENT_TYPES:
        raise UploadError("The file is declared as .npy but is not a valid .npy file.")
    if suffix in _PARQUET_SUFFIXES or mime in _PARQUET_CONTENT_TYPES:
        raise UploadError("The file is declared as Parquet but is not a valid Parquet file.")
    if prefix.startswith(b"PK\x03\x04"):
        raise UploadError(
            "The file is a ZIP archive (for example .xlsx or .npz); upload a CSV, a .npy or a "
            "Parquet file."
        )
    if prefix.startswith(b"\x1f\x8b"):
        raise UploadError("The file is gzip-compressed; upload it uncompressed.")
    if b"\x00" in prefix:
        raise UploadError(
            "The file is binary, not UTF-8 CSV text (UTF-16 text is not supported either)."
        )
    return "csv"
