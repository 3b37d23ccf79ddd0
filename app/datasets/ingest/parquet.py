"""Parquet uploads: numeric columns without nulls, read from a spool batch by batch.

The footer is at the end of the file, so Parquet needs random access: the upload is spooled to
a scratch file first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.ingest.checks import (
    binary_row,
    check_finite,
    first_bad_cell,
    non_finite_error,
    select_columns,
)
from app.datasets.ingest.reader import RowSink, Upload
from app.kit.errors import UploadError

_PARQUET_BUFFER_BYTES = 1 << 20
_PARQUET_BATCH_BYTES = 2 << 20


def ingest_parquet(upload: Upload, wanted: list[str] | None, writer: RowSink) -> list[str]:
    """Convert the spooled Parquet file into `writer`; nulls and non-numeric columns are errors.
    Return the kept columns' names."""
    parquet, schema, n_rows = open_parquet(upload.spool())
    names = list(schema.names)
    if not names:
        raise UploadError("The Parquet file has no columns.", code="empty-dataset")
    selected = select_columns(names, wanted)
    check_numeric(schema, selected)
    if n_rows == 0:
        raise UploadError("The Parquet file has no rows.", code="empty-dataset")

    writer.start(len(selected))
    step = max(1, _PARQUET_BATCH_BYTES // (8 * len(selected)))
    first = 1
    try:
        for batch in parquet.iter_batches(batch_size=step, columns=selected):
            block = convert_batch(batch, selected, first)
            check_finite(block, first, selected, binary_row)
            writer.append(block)
            first += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise UploadError(f"The Parquet file cannot be read ({exc}).") from None
    return selected


def open_parquet(spool: IO[bytes]) -> tuple[pq.ParquetFile, pa.Schema, int]:
    """The file, its schema and its row count (an `invalid-file` error if unreadable)."""
    try:
        # Pre-buffering reads whole row groups ahead and unbuffered streams read whole column
        # chunks: with one 1M-row row group either took the peak past 400 MB (measured).
        parquet = pq.ParquetFile(spool, pre_buffer=False, buffer_size=_PARQUET_BUFFER_BYTES)
        return parquet, parquet.schema_arrow, parquet.metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UploadError(f"The Parquet file cannot be read ({exc}).") from None


def is_numeric_arrow_type(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    )


def check_numeric(schema: pa.Schema, selected: list[str], where: str = "") -> None:
    """A `non-numeric-value` error naming the first kept column that is not numeric (and,
    with `where`, the file it is in: "In part-1.parquet, c...")."""
    for column in selected:
        kind = schema.field(column).type
        if not is_numeric_arrow_type(kind):
            raise UploadError(
                f"{where}Column {column!r} has type {kind}; only numeric columns are accepted.",
                code="non-numeric-value",
                column=column,
            )


def convert_batch(
    batch: pa.RecordBatch,
    selected: list[str],
    first: int,
    where: Callable[[int], str] = binary_row,
) -> npt.NDArray[np.float64]:
    """A batch's kept columns as float64 rows; a null is an error naming its row and column
    (`where` says how a row is named)."""
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
        # The first bad value in reading order wins, whether it is a null or not finite.
        bad = nulls | ~np.isfinite(block)
        cell = first_bad_cell(bad)
        assert cell is not None
        row, column = first + cell[0], selected[cell[1]]
        if nulls[cell]:
            raise UploadError(
                f"{where(row)}, column {column!r}: the value is missing (null).",
                code="non-numeric-value",
                row=row,
                column=column,
            )
        raise non_finite_error(row, column, where)
    return block
