"""`.npy` uploads: a 2-D integer or floating-point array, converted in row blocks as it streams.

A C-ordered array is converted as its data streams in. A Fortran-ordered array is column-major,
so its data is spooled first and each row block is gathered with one read per column.
"""

from __future__ import annotations

import os
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from app.datasets.ingest.checks import binary_row, check_finite, select_columns
from app.datasets.ingest.reader import RowSink, Upload, UploadReader, read_exactly
from app.kit.errors import UploadError

# Rows of a binary source converted per step: bounded by bytes, not rows.
_BINARY_BLOCK_BYTES = 8 << 20


def ingest_npy(
    upload: Upload, wanted: list[str] | None, writer: RowSink, gaps: bool = False
) -> list[str]:
    """Check the header, then convert the data in row blocks into `writer`; return the kept
    columns' names (`x0`, `x1`, ...: an array has no column names). With `gaps`, NaN (a
    missing value) is left to the table's policy (app.datasets.ingest.tabular)."""
    shape, fortran_order, dtype = _read_header(upload.reader)
    n_rows, n_cols = _check_array(shape, dtype)
    selected = select_columns([f"x{j}" for j in range(n_cols)], wanted)
    if n_rows == 0:
        raise UploadError("The .npy array has no rows.", code="empty-dataset")
    truncated = UploadError(
        f"The .npy file is truncated: its header promises shape {tuple(shape)} of {dtype}."
    )
    picks = [int(column[1:]) for column in selected]
    spool = upload.spool() if fortran_order else None
    if spool is not None and os.fstat(spool.fileno()).st_size < n_rows * n_cols * dtype.itemsize:
        raise truncated

    writer.start(len(selected))
    step = max(1, _BINARY_BLOCK_BYTES // (max(dtype.itemsize, 8) * n_cols))
    for first in range(0, n_rows, step):
        count = min(step, n_rows - first)
        if spool is None:
            values = _next_rows(upload.reader, count, n_cols, picks, dtype, truncated)
        else:
            values = _gather_rows(spool, first, count, n_rows, picks, dtype)
        block = values.astype(np.float64)
        if not gaps:
            check_finite(block, first + 1, selected, binary_row)
        writer.append(block)
    return selected


def _read_header(reader: UploadReader) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """(shape, fortran_order, dtype) from the header (an `invalid-file` error if unreadable)."""
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
    return shape, fortran_order, dtype


def _check_array(shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[int, int]:
    """(rows, columns) of an array the ingest accepts: numeric, 2-D, with columns."""
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
    return n_rows, n_cols


def _next_rows(
    reader: UploadReader,
    count: int,
    n_cols: int,
    picks: list[int],
    dtype: np.dtype[Any],
    truncated: UploadError,
) -> npt.NDArray[Any]:
    """The next `count` rows of a C-ordered array as it streams in, the kept columns only."""
    raw = read_exactly(reader, count * n_cols * dtype.itemsize)
    if raw is None:
        raise truncated
    rows = np.frombuffer(raw, dtype=dtype).reshape(count, n_cols)
    return rows if picks == list(range(n_cols)) else rows[:, picks]


def _gather_rows(
    spool: IO[bytes], first: int, count: int, n_rows: int, picks: list[int], dtype: np.dtype[Any]
) -> npt.NDArray[Any]:
    """Rows `first` to `first + count` of a spooled Fortran-ordered array: one read a column."""
    values = np.empty((count, len(picks)), dtype=dtype)
    for out_col, j in enumerate(picks):
        at = (j * n_rows + first) * dtype.itemsize
        values[:, out_col] = np.frombuffer(
            os.pread(spool.fileno(), count * dtype.itemsize, at), dtype=dtype
        )
    return values
