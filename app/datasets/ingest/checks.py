"""Checks every format shares: the columns to keep, and errors that name the row and column.

An error names the first offending value in reading order (row, then column), with the row
counted from 1 the way its format counts rows (`binary_row` for .npy and Parquet; CSV counts
data rows after its header).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from app.kit.errors import UploadError


def select_columns(names: Sequence[str], wanted: list[str] | None) -> list[str]:
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


def first_bad_cell(bad: npt.NDArray[np.bool_]) -> tuple[int, int] | None:
    """(row, column) of the first True in row-major order, or None."""
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size == 0:
        return None
    row = int(rows[0])
    return row, int(np.flatnonzero(bad[row])[0])


def binary_row(row: int) -> str:
    return f"Row {row} (counted from 1)"


def non_finite_error(row: int, column: str, where: Callable[[int], str]) -> UploadError:
    return UploadError(
        f"{where(row)}, column {column!r}: the value is NaN or infinite; only finite numbers "
        "are accepted.",
        code="non-finite-value",
        row=row,
        column=column,
    )


def check_finite(
    block: npt.NDArray[np.float64], first_row: int, columns: list[str], where: Callable[[int], str]
) -> None:
    finite = np.isfinite(block)
    if finite.all():
        return
    cell = first_bad_cell(~finite)
    assert cell is not None
    raise non_finite_error(first_row + cell[0], columns[cell[1]], where)
