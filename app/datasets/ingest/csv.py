"""CSV uploads: a header row, then numbers; pyarrow's fast path, the csv module's exact errors.

The upload is converted by pyarrow's streaming reader; when it fails on a block, the upload is
read again from the start with the csv module, which names the exact row, column and kind of
error (the fast path reports neither a reliable row number nor which of our errors applies).
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from app.datasets.ingest.checks import check_finite, non_finite_error, select_columns
from app.datasets.ingest.reader import (
    READ_CHUNK,
    RowSink,
    Upload,
    UploadReader,
    discard_exactly,
)
from app.kit.errors import UploadError

# pyarrow's streaming CSV reader holds a few dozen blocks in flight: peak memory grows with the
# block size (about 120 MB at 1 MiB, 240 MB at 4 MiB, measured) while speed does not change.
_CSV_BLOCK_SIZE = 1 << 20
_MAX_HEADER_BYTES = 4 << 20
_UTF8_BOM = b"\xef\xbb\xbf"

# The number grammar accepted in CSV fields. It mirrors what pyarrow's float parser accepts
# (spaces and tabs around the value, optional sign, decimal or exponent notation), so the exact
# re-scan that locates an error agrees with the fast path about which values are numbers.
_NUMBER_RE = re.compile(r"[ \t]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*")
_NON_FINITE_RE = re.compile(
    r"[ \t]*[+-]?(?:nan(?:\([0-9A-Za-z_]*\))?|inf(?:inity)?)[ \t]*", re.IGNORECASE
)
_UNDECODABLE_RE = re.compile("[\udc80-\udcff]")


def ingest_csv(upload: Upload, wanted: list[str] | None, writer: RowSink) -> list[str]:
    """Convert a CSV upload into `writer`; return the kept columns' names."""
    if upload.start is not None:
        return _ingest_rewindable(
            upload.src, upload.start, upload.reader, wanted, upload.max_bytes, writer
        )
    # The exact error re-scan rewinds the source, so spool one that cannot.
    spool = upload.spool()
    return _ingest_rewindable(spool, 0, UploadReader(spool, None), wanted, None, writer)


def _ingest_rewindable(
    src: IO[bytes],
    start: int,
    reader: UploadReader,
    wanted: list[str] | None,
    max_bytes: int | None,
    writer: RowSink,
) -> list[str]:
    """Parse with pyarrow's streaming reader; on any parse failure re-scan exactly in Python.

    pyarrow reports neither a reliable row number nor which of our error kinds applies, so
    when a block fails the upload is read again from `start` with the csv module: rows that
    pyarrow already converted are only counted, and from the first unconverted row on the
    rows are validated (raising the exact error) and written.
    """
    names = read_csv_header(reader)
    header_end = reader.position
    selected = select_columns(names, wanted)
    writer.start(len(selected))

    rows_done = _csv_fast_path(reader, names, selected, writer)
    if rows_done is None:
        return selected
    # pyarrow's read-ahead may still be pulling from `src` after it reported the error.
    reader.detach()
    src.seek(start)
    rescan = UploadReader(src, max_bytes)
    discard_exactly(rescan, header_end)
    _csv_exact_path(rescan, names, selected, rows_done, writer)
    return selected


def read_csv_header(reader: UploadReader) -> list[str]:
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


def _read_line(reader: UploadReader) -> bytes | None:
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
        chunk = reader.read(READ_CHUNK)
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


def _csv_fast_path(
    reader: UploadReader, names: list[str], selected: list[str], writer: RowSink
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
            check_finite(block, rows_done + 1, selected, _csv_row)
            writer.append(block)
            rows_done += batch.num_rows
    except pa.ArrowException:
        return rows_done
    return None


def _csv_exact_path(
    reader: UploadReader,
    names: list[str],
    selected: list[str],
    skip_rows: int,
    writer: RowSink,
) -> None:
    """Parse with the csv module, counting (not checking) the first `skip_rows` data rows."""
    text = io.TextIOWrapper(
        io.BufferedReader(reader, READ_CHUNK),
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
            raise non_finite_error(row, column, _csv_row)
        return value
    if _NON_FINITE_RE.fullmatch(field):
        raise non_finite_error(row, column, _csv_row)
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


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _csv_row(row: int) -> str:
    return (
        f"Data row {row} (rows are counted from 1 after the header row; blank lines are not "
        "counted)"
    )
