"""Dataset ingestion: stream an uploaded CSV, .npy or Parquet file into a validated float64 .npy.

The upload is read in chunks (never whole), checked completely, and written as a C-ordered
little-endian float64 `.npy` that the worker memory-maps with `app.datasets.storage.open_rows`.
The output is written to a hidden temporary file in `dest_dir` and renamed to its final name
only once every value has been validated, so a rejected upload leaves nothing behind.

Values are stored exactly as uploaded; `app.datasets.service` then clips the stored rows into
the declared domain before the dataset exists.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.kit.errors import UploadError

__all__ = ["IngestedMatrix", "ingest_file"]

_READ_CHUNK = 1 << 20
# pyarrow's streaming CSV reader holds a few dozen blocks in flight: peak memory grows with the
# block size (about 120 MB at 1 MiB, 240 MB at 4 MiB, measured) while speed does not change.
_CSV_BLOCK_SIZE = 1 << 20
# Rows of a binary source (npy, Parquet) converted per step: bounded by bytes, not rows.
_BINARY_BLOCK_BYTES = 8 << 20
_PARQUET_BUFFER_BYTES = 1 << 20
_PARQUET_BATCH_BYTES = 2 << 20
_MAX_HEADER_BYTES = 4 << 20
_SNIFF_BYTES = 64 << 10

_NPY_MAGIC = b"\x93NUMPY"
_PARQUET_MAGIC = b"PAR1"
_UTF8_BOM = b"\xef\xbb\xbf"
# Our own .npy header has a fixed size so it can be rewritten with the final row count in place.
_OUT_HEADER_BYTES = 128

# The number grammar accepted in CSV fields. It mirrors what pyarrow's float parser accepts
# (spaces and tabs around the value, optional sign, decimal or exponent notation), so the exact
# re-scan that locates an error agrees with the fast path about which values are numbers.
_NUMBER_RE = re.compile(r"[ \t]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*")
_NON_FINITE_RE = re.compile(
    r"[ \t]*[+-]?(?:nan(?:\([0-9A-Za-z_]*\))?|inf(?:inity)?)[ \t]*", re.IGNORECASE
)
_UNDECODABLE_RE = re.compile("[\udc80-\udcff]")
_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")

_NPY_SUFFIXES = (".npy",)
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_NPY_CONTENT_TYPES = ("application/x-npy", "application/npy")
_PARQUET_CONTENT_TYPES = (
    "application/vnd.apache.parquet",
    "application/x-parquet",
    "application/parquet",
)

_Format = Literal["csv", "npy", "parquet"]


@dataclass(frozen=True)
class IngestedMatrix:
    """A validated dataset on disk: a float64 `.npy` of shape (n_rows, n_cols)."""

    path: Path
    n_rows: int
    n_cols: int
    columns: list[str]


def ingest_file(
    src: IO[bytes],
    *,
    filename: str | None,
    content_type: str | None,
    dest_dir: Path,
    columns: list[str] | None = None,
    max_bytes: int | None = None,
    name: str | None = None,
) -> IngestedMatrix:
    """Validate an uploaded dataset and store it as `dest_dir/<name>.npy`.

    `src` is read from its current position in chunks. The format is sniffed from the content
    (.npy and Parquet magic bytes), then taken from `filename`/`content_type`, else CSV.
    `columns` selects and orders the columns to keep; values of other columns are not checked.
    `max_bytes` caps the bytes read from `src` (UploadError `too-large`, status 413).
    `name` is the file stem (default: a fresh uuid4 hex); it must be a plain file-name token.

    Raises UploadError (codes `invalid-file`, `non-numeric-value`, `non-finite-value`,
    `ragged-row`, `empty-dataset`, `too-large`) naming the row and column at fault where there
    is one. On any error nothing is left in `dest_dir`.
    """
    stem = uuid.uuid4().hex if name is None else name
    if not _SAFE_NAME_RE.fullmatch(stem):
        raise ValueError(f"unsafe dataset file name {stem!r}")
    if columns is not None and not all(isinstance(c, str) for c in columns):
        raise UploadError("`columns` must be a list of column names (strings)")
    dest_dir.mkdir(parents=True, exist_ok=True)
    final_path = dest_dir / f"{stem}.npy"
    if final_path.exists():
        raise FileExistsError(final_path)

    start = src.tell() if _is_seekable(src) else None
    reader = _UploadReader(src, max_bytes)
    prefix = reader.peek(_SNIFF_BYTES)
    if not prefix:
        raise UploadError("The uploaded file is empty.", code="empty-dataset")
    fmt = _detect_format(prefix, filename, content_type)

    writer = _MatrixWriter(dest_dir)
    try:
        with contextlib.ExitStack() as stack:

            def spool_rest() -> IO[bytes]:
                # An anonymous temporary file: the OS removes it even if this process dies.
                spool = stack.enter_context(tempfile.TemporaryFile(dir=dest_dir, prefix=".upload-"))
                _copy_stream(reader, spool)
                spool.seek(0)
                return spool

            if fmt == "npy":
                selected = _ingest_npy(reader, spool_rest, columns, writer)
            elif fmt == "parquet":
                # The footer is at the end of the file: Parquet needs random access.
                selected = _ingest_parquet(spool_rest(), columns, writer)
            elif start is not None:
                selected = _ingest_csv(src, start, reader, columns, max_bytes, writer)
            else:
                # The exact error re-scan rewinds the source, so spool one that cannot.
                spool = spool_rest()
                selected = _ingest_csv(spool, 0, _UploadReader(spool, None), columns, None, writer)
        if writer.n_rows == 0:
            raise UploadError("The file has a header but no data rows.", code="empty-dataset")
        writer.commit(final_path)
    except BaseException:
        writer.discard()
        raise
    return IngestedMatrix(
        path=final_path, n_rows=writer.n_rows, n_cols=len(selected), columns=list(selected)
    )


# --------------------------------------------------------------------------------------------
# Reading the upload


class _UploadReader(io.RawIOBase):
    """Reads `src` in chunks, counting bytes against `max_bytes`; supports peek and unread."""

    def __init__(self, src: IO[bytes], max_bytes: int | None) -> None:
        super().__init__()
        self._src = src
        self._max_bytes = max_bytes
        self._pending = b""
        self.bytes_from_src = 0
        self.position = 0  # bytes handed to the consumer, net of unread()
        # pyarrow reads from its own threads; the lock lets `detach` wait out a read in flight.
        self._lock = threading.Lock()
        self._detached = False

    def readable(self) -> bool:
        return True

    def detach(self) -> None:
        """Stop reading `src` (later reads see end of input) so its owner may seek it."""
        with self._lock:
            self._detached = True

    def _fetch(self, size: int) -> bytes:
        with self._lock:
            if self._detached:
                return b""
            data = self._src.read(size)
        if not data:
            return b""
        self.bytes_from_src += len(data)
        if self._max_bytes is not None and self.bytes_from_src > self._max_bytes:
            raise UploadError(
                f"The upload is larger than the limit of {self._max_bytes} bytes.",
                code="too-large",
                status=413,
                max_bytes=self._max_bytes,
            )
        return bytes(data)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = [self._pending]
            self._pending = b""
            while chunk := self._fetch(_READ_CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
        elif self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
        else:
            data = self._fetch(size)
        self.position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def peek(self, size: int) -> bytes:
        """Return up to `size` bytes from the front without consuming them (short at EOF)."""
        while len(self._pending) < size:
            chunk = self._fetch(size - len(self._pending))
            if not chunk:
                break
            self._pending += chunk
        return self._pending[:size]

    def unread(self, data: bytes) -> None:
        self._pending = data + self._pending
        self.position -= len(data)


def _is_seekable(src: IO[bytes]) -> bool:
    try:
        return bool(src.seekable())
    except (AttributeError, ValueError, OSError):
        return False


def _copy_stream(reader: _UploadReader, dest: IO[bytes]) -> None:
    while chunk := reader.read(_READ_CHUNK):
        dest.write(chunk)
    dest.flush()


def _detect_format(prefix: bytes, filename: str | None, content_type: str | None) -> _Format:
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


# --------------------------------------------------------------------------------------------
# Writing the output


class _MatrixWriter:
    """Appends float64 rows to a hidden temporary .npy in the destination directory."""

    def __init__(self, dest_dir: Path) -> None:
        self._dest_dir = dest_dir
        self._file: IO[bytes] | None = None
        self._tmp_path: Path | None = None
        self.n_cols: int | None = None
        self.n_rows = 0

    def start(self, n_cols: int) -> None:
        fd, tmp = tempfile.mkstemp(dir=self._dest_dir, prefix=".ingest-", suffix=".npy.part")
        self._tmp_path = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self.n_cols = n_cols
        self._file.write(_npy_header(0, n_cols))

    def append(self, block: npt.NDArray[np.float64]) -> None:
        assert self._file is not None and block.ndim == 2 and block.shape[1] == self.n_cols
        data = np.ascontiguousarray(block, dtype="<f8")
        self._file.write(data.data.cast("B"))
        self.n_rows += data.shape[0]

    def commit(self, final_path: Path) -> None:
        assert self._file is not None and self._tmp_path is not None and self.n_cols is not None
        self._file.seek(0)
        self._file.write(_npy_header(self.n_rows, self.n_cols))
        self._file.flush()
        # The dataset row in the database will point at this file: make it durable first.
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._tmp_path, final_path)
        self._tmp_path = None
        _fsync_directory(self._dest_dir)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp_path is not None:
            self._tmp_path.unlink(missing_ok=True)
            self._tmp_path = None


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _npy_header(n_rows: int, n_cols: int) -> bytes:
    """A version 1.0 .npy header for a C-ordered <f8 array, padded to a fixed size."""
    text = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({n_rows}, {n_cols}), }}"
    header_len = _OUT_HEADER_BYTES - len(_NPY_MAGIC) - 4
    padded = text.ljust(header_len - 1) + "\n"
    if len(padded) != header_len:
        raise ValueError(f"matrix shape ({n_rows}, {n_cols}) too large for the .npy header")
    return _NPY_MAGIC + b"\x01\x00" + header_len.to_bytes(2, "little") + padded.encode("latin1")


# --------------------------------------------------------------------------------------------
# Column selection and value errors


def _select_columns(names: Sequence[str], wanted: list[str] | None) -> list[str]:
    """Validate the source's column names and return those to keep, in output order."""
    seen: set[str] = set()
    for position, column in enumerate(names, start=1):
        if column.strip() == "":
            raise UploadError(f"Column {position} has no name; every column needs a name.")
        if column in seen:
            raise UploadError(f"Column name {column!r} appears more than once.", column=column)
        seen.add(column)
    if wanted is None:
        selected = list(names)
    else:
        chosen: set[str] = set()
        for column in wanted:
            if column not in seen:
                raise UploadError(
                    f"Requested column {column!r} is not in the file (its columns: "
                    f"{_preview(names)}).",
                    column=column,
                )
            if column in chosen:
                raise UploadError(f"Column {column!r} is requested twice.", column=column)
            chosen.add(column)
        selected = list(wanted)
    if not selected:
        raise UploadError("No columns: the dataset needs at least one.", code="empty-dataset")
    return selected


def _preview(items: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(repr(item) for item in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _first_bad_cell(bad: npt.NDArray[np.bool_]) -> tuple[int, int] | None:
    """(row, column) of the first True in row-major order, or None."""
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size == 0:
        return None
    row = int(rows[0])
    return row, int(np.flatnonzero(bad[row])[0])


def _csv_row(row: int) -> str:
    return (
        f"Data row {row} (rows are counted from 1 after the header row; blank lines are not "
        "counted)"
    )


def _binary_row(row: int) -> str:
    return f"Row {row} (counted from 1)"


def _non_finite_error(row: int, column: str, where: Callable[[int], str]) -> UploadError:
    return UploadError(
        f"{where(row)}, column {column!r}: the value is NaN or infinite; only finite numbers "
        "are accepted.",
        code="non-finite-value",
        row=row,
        column=column,
    )


def _check_finite(
    block: npt.NDArray[np.float64], first_row: int, columns: list[str], where: Callable[[int], str]
) -> None:
    finite = np.isfinite(block)
    if finite.all():
        return
    cell = _first_bad_cell(~finite)
    assert cell is not None
    raise _non_finite_error(first_row + cell[0], columns[cell[1]], where)


# --------------------------------------------------------------------------------------------
# CSV


def _ingest_csv(
    src: IO[bytes],
    start: int,
    reader: _UploadReader,
    wanted: list[str] | None,
    max_bytes: int | None,
    writer: _MatrixWriter,
) -> list[str]:
    """Parse with pyarrow's streaming reader; on any parse failure re-scan exactly in Python.

    pyarrow reports neither a reliable row number nor which of our error kinds applies, so
    when a block fails the upload is read again from `start` with the csv module: rows that
    pyarrow already converted are only counted, and from the first unconverted row on the
    rows are validated (raising the exact error) and written.
    """
    names = _read_csv_header(reader)
    header_end = reader.position
    selected = _select_columns(names, wanted)
    writer.start(len(selected))

    rows_done = _csv_fast_path(reader, names, selected, writer)
    if rows_done is None:
        return selected
    # pyarrow's read-ahead may still be pulling from `src` after it reported the error.
    reader.detach()
    src.seek(start)
    rescan = _UploadReader(src, max_bytes)
    _discard_exactly(rescan, header_end)
    _csv_exact_path(rescan, names, selected, rows_done, writer)
    return selected


def _read_csv_header(reader: _UploadReader) -> list[str]:
    """Consume the BOM, leading blank lines and the header line; return the column names."""
    if reader.peek(len(_UTF8_BOM)) == _UTF8_BOM:
        reader.read(len(_UTF8_BOM))
    while True:
        line = _read_line(reader)
        if line is None:
            raise UploadError("The file has no header row and no data rows.", code="empty-dataset")
        if line.strip(b"\r\n") != b"":
            break
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UploadError(
            f"The header row is not valid UTF-8 text (byte {exc.start} of the line)."
        ) from None
    try:
        rows = list(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise UploadError(
            f"The header row cannot be parsed as CSV ({exc}); line breaks inside column names "
            "are not supported."
        ) from None
    names = rows[0] if rows else []
    if _looks_like_data(names):
        raise UploadError(
            "The first row holds numbers, not column names: a CSV upload needs a header row."
        )
    return names


def _looks_like_data(names: list[str]) -> bool:
    """True when a header row is really a data row (the header is missing).

    Numbered headers such as `0,1,2` (what pandas writes for an unnamed array) are names.
    """
    if not names or not all(_NUMBER_RE.fullmatch(n) or _NON_FINITE_RE.fullmatch(n) for n in names):
        return False
    stripped = [n.strip(" \t") for n in names]
    numbered = [str(i) for i in range(len(names))], [str(i) for i in range(1, len(names) + 1)]
    return stripped not in numbered


def _read_line(reader: _UploadReader) -> bytes | None:
    """The next line (up to and excluding its CR, LF or CRLF), or None at end of input."""
    buf = bytearray()
    scanned = 0
    while True:
        cut = _find_line_break(buf, scanned)
        if cut is not None:
            end, after = cut
            if buf[end] == 0x0D and after == len(buf):
                more = reader.read(1)
                if more == b"\n":
                    after += 1
                elif more:
                    reader.unread(more)
            line, rest = bytes(buf[:end]), bytes(buf[after:])
            reader.unread(rest)
            return line
        scanned = len(buf)
        if len(buf) > _MAX_HEADER_BYTES:
            raise UploadError(
                f"No line break in the first {_MAX_HEADER_BYTES} bytes: this does not look like "
                "a CSV file."
            )
        chunk = reader.read(_READ_CHUNK)
        if not chunk:
            return bytes(buf) if buf else None
        buf += chunk


def _find_line_break(buf: bytearray, start: int) -> tuple[int, int] | None:
    """Index of the first CR or LF at or after `start`, and the index just after the break."""
    lf = buf.find(b"\n", start)
    cr = buf.find(b"\r", start, lf if lf >= 0 else len(buf))
    if cr >= 0:
        return cr, cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
    if lf >= 0:
        return lf, lf + 1
    return None


def _discard_exactly(reader: _UploadReader, count: int) -> None:
    while count > 0:
        chunk = reader.read(min(count, _READ_CHUNK))
        if not chunk:
            raise UploadError("The file changed while it was being read.")
        count -= len(chunk)


def _csv_fast_path(
    reader: _UploadReader, names: list[str], selected: list[str], writer: _MatrixWriter
) -> int | None:
    """Convert with pyarrow; None when the whole file converted, else the rows written."""
    rows_done = 0
    float64 = pa.float64()
    try:
        stream = pa_csv.open_csv(
            reader,
            read_options=pa_csv.ReadOptions(column_names=names, block_size=_CSV_BLOCK_SIZE),
            parse_options=pa_csv.ParseOptions(
                delimiter=",",
                quote_char='"',
                double_quote=True,
                newlines_in_values=True,
                ignore_empty_lines=True,
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={column: float64 for column in selected},
                include_columns=selected,
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in stream:
            block = np.column_stack([batch.column(c).to_numpy() for c in selected])
            _check_finite(block, rows_done + 1, selected, _csv_row)
            writer.append(block)
            rows_done += batch.num_rows
    except pa.ArrowException:
        return rows_done
    return None


def _csv_exact_path(
    reader: _UploadReader,
    names: list[str],
    selected: list[str],
    skip_rows: int,
    writer: _MatrixWriter,
) -> None:
    """Parse with the csv module, counting (not checking) the first `skip_rows` data rows."""
    text = io.TextIOWrapper(
        io.BufferedReader(reader, _READ_CHUNK),
        encoding="utf-8",
        errors="surrogateescape",
        newline="",
    )
    records = csv.reader(text, strict=True)
    n_fields = len(names)
    index = {column: i for i, column in enumerate(names)}
    picks = [(index[column], column) for column in selected]
    pending: list[list[float]] = []
    row = 0
    while True:
        try:
            record = next(records, None)
        except csv.Error as exc:
            raise UploadError(
                f"{_csv_row(row + 1)} is not valid CSV ({exc}).", row=row + 1
            ) from None
        if record is None:
            break
        if not record:
            continue
        row += 1
        if row <= skip_rows:
            continue
        if len(record) != n_fields:
            missing = names[len(record)] if len(record) < n_fields else None
            raise UploadError(
                f"{_csv_row(row)} has {len(record)} field{'' if len(record) == 1 else 's'}; "
                f"the header has {n_fields}.",
                code="ragged-row",
                row=row,
                column=missing,
            )
        pending.append([_parse_number(record[i], row, column) for i, column in picks])
        if len(pending) >= 8192:
            writer.append(np.array(pending, dtype=np.float64))
            pending = []
    if pending:
        writer.append(np.array(pending, dtype=np.float64))


def _parse_number(field: str, row: int, column: str) -> float:
    if _NUMBER_RE.fullmatch(field):
        value = float(field)  # "1e999" or a 400-digit integer parse to inf: refuse those too
        if not math.isfinite(value):
            raise _non_finite_error(row, column, _csv_row)
        return value
    if _NON_FINITE_RE.fullmatch(field):
        raise _non_finite_error(row, column, _csv_row)
    if _UNDECODABLE_RE.search(field):
        raise UploadError(
            f"{_csv_row(row)}, column {column!r}: the value is not valid UTF-8 text.",
            row=row,
            column=column,
        )
    described = "an empty field" if field.strip(" \t") == "" else _show(field)
    raise UploadError(
        f"{_csv_row(row)}, column {column!r}: {described} is not a number.",
        code="non-numeric-value",
        row=row,
        column=column,
    )


# --------------------------------------------------------------------------------------------
# .npy


def _ingest_npy(
    reader: _UploadReader,
    spool_rest: Callable[[], IO[bytes]],
    wanted: list[str] | None,
    writer: _MatrixWriter,
) -> list[str]:
    """Check the header, then convert the data in row blocks as it streams in.

    A Fortran-ordered array is column-major, so its data is spooled first and each row block
    is gathered with one read per column.
    """
    fmt = np.lib.format
    try:
        version = fmt.read_magic(reader)
        if version == (1, 0):
            shape, fortran_order, dtype = fmt.read_array_header_1_0(reader)
        elif version == (2, 0):
            shape, fortran_order, dtype = fmt.read_array_header_2_0(reader)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except (ValueError, OSError, SyntaxError) as exc:
        raise UploadError(f"The .npy header cannot be read ({exc}).") from None

    if dtype.fields is not None or dtype.kind not in "iuf":
        raise UploadError(
            f"The .npy array has dtype {dtype}; only integer and floating-point arrays are "
            "accepted."
        )
    if len(shape) != 2:
        raise UploadError(
            f"The .npy array has shape {tuple(shape)}; a 2-D array (rows, columns) is required."
        )
    n_rows, n_cols = (int(n) for n in shape)
    if n_cols == 0:
        raise UploadError("The .npy array has no columns.", code="empty-dataset")
    selected = _select_columns([f"x{j}" for j in range(n_cols)], wanted)
    if n_rows == 0:
        raise UploadError("The .npy array has no rows.", code="empty-dataset")
    truncated = UploadError(
        f"The .npy file is truncated: its header promises shape {tuple(shape)} of {dtype}."
    )
    picks = [int(column[1:]) for column in selected]
    keep_all = picks == list(range(n_cols))
    itemsize = dtype.itemsize
    step = max(1, _BINARY_BLOCK_BYTES // (max(itemsize, 8) * n_cols))
    spool = spool_rest() if fortran_order else None
    if spool is not None and os.fstat(spool.fileno()).st_size < n_rows * n_cols * itemsize:
        raise truncated

    writer.start(len(selected))
    for first in range(0, n_rows, step):
        count = min(step, n_rows - first)
        if spool is None:
            raw = _read_exactly(reader, count * n_cols * itemsize)
            if raw is None:
                raise truncated
            rows = np.frombuffer(raw, dtype=dtype).reshape(count, n_cols)
            values = rows if keep_all else rows[:, picks]
        else:
            values = np.empty((count, len(picks)), dtype=dtype)
            for out_col, j in enumerate(picks):
                at = (j * n_rows + first) * itemsize
                values[:, out_col] = np.frombuffer(
                    os.pread(spool.fileno(), count * itemsize, at), dtype=dtype
                )
        block = values.astype(np.float64)
        _check_finite(block, first + 1, selected, _binary_row)
        writer.append(block)
    return selected


def _read_exactly(reader: _UploadReader, size: int) -> bytes | None:
    """`size` bytes, or None when the input ends first."""
    parts: list[bytes] = []
    missing = size
    while missing > 0:
        chunk = reader.read(missing)
        if not chunk:
            return None
        parts.append(chunk)
        missing -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --------------------------------------------------------------------------------------------
# Parquet


def _is_numeric_arrow_type(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    )


def _ingest_parquet(spool: IO[bytes], wanted: list[str] | None, writer: _MatrixWriter) -> list[str]:
    """Read the spooled Parquet file batch by batch; nulls and non-numeric columns are errors."""
    try:
        # Pre-buffering reads whole row groups ahead and unbuffered streams read whole column
        # chunks: with one 1M-row row group either took the peak past 400 MB (measured).
        parquet = pq.ParquetFile(spool, pre_buffer=False, buffer_size=_PARQUET_BUFFER_BYTES)
        schema = parquet.schema_arrow
        n_rows = parquet.metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UploadError(f"The Parquet file cannot be read ({exc}).") from None
    names = list(schema.names)
    if not names:
        raise UploadError("The Parquet file has no columns.", code="empty-dataset")
    selected = _select_columns(names, wanted)
    for column in selected:
        kind = schema.field(column).type
        if not _is_numeric_arrow_type(kind):
            raise UploadError(
                f"Column {column!r} has type {kind}; only numeric columns are accepted.",
                code="non-numeric-value",
                column=column,
            )
    if n_rows == 0:
        raise UploadError("The Parquet file has no rows.", code="empty-dataset")

    writer.start(len(selected))
    step = max(1, _PARQUET_BATCH_BYTES // (8 * len(selected)))
    first = 1
    try:
        for batch in parquet.iter_batches(batch_size=step, columns=selected):
            block = np.empty((batch.num_rows, len(selected)), dtype=np.float64)
            nulls = np.zeros(block.shape, dtype=bool)
            for j, column in enumerate(selected):
                values = batch.column(column)
                if values.null_count:
                    nulls[:, j] = values.is_null().to_numpy(zero_copy_only=False)
                # Unsafe cast: int64 beyond 2**53 rounds to the nearest double, as in numpy.
                converted = values.cast(pa.float64(), safe=False)
                block[:, j] = converted.to_numpy(zero_copy_only=False)
            if nulls.any():
                bad = nulls | ~np.isfinite(block)
                cell = _first_bad_cell(bad)
                assert cell is not None
                row, column = first + cell[0], selected[cell[1]]
                if nulls[cell]:
                    raise UploadError(
                        f"{_binary_row(row)}, column {column!r}: the value is missing (null).",
                        code="non-numeric-value",
                        row=row,
                        column=column,
                    )
                raise _non_finite_error(row, column, _binary_row)
            _check_finite(block, first, selected, _binary_row)
            writer.append(block)
            first += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise UploadError(f"The Parquet file cannot be read ({exc}).") from None
    return selected
