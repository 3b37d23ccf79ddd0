"""Reading a local table of rows into the float64 matrix the clustering code takes: a .npy
matrix, a CSV file with a header row or a Parquet file, optionally only some of its columns by
name; and the library's reading of a vector given as text (numbers or names separated by
commas, or a JSON array), as the service's form fields take it.

Only the caller's own files are read here (the CLI's `privclust cluster`, `PrivateKMeans`); the
service ingests uploads with its own streaming readers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def parse_vector(text: str, what: str = "numbers") -> list[Any]:
    """Items of a vector given as text: a JSON array ("[0, 1.5]"), or values separated by
    commas ("0,1.5"; blanks around them ignored). `what` is "numbers" (floats) or "names"."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON array of {what}: {text!r}") from exc
        if not isinstance(items, list):
            raise ValueError(f"not a JSON array of {what}: {text!r}")
    else:
        items = [part.strip() for part in stripped.split(",")]
    if not items or any(item == "" for item in items):
        raise ValueError(f"give {what} separated by commas, or a JSON array: {text!r}")
    if what == "names":
        if not all(isinstance(item, str) for item in items):
            raise ValueError(f"not a list of column names: {text!r}")
        return items
    try:
        return [float(item) for item in items if not isinstance(item, bool)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a list of numbers: {text!r}") from exc


def read_rows(path: Path, columns: Sequence[str] | None = None) -> tuple[Any, list[str]]:
    """(N x d float64 matrix, column names) of a .npy, Parquet or CSV file; with `columns`,
    only those (by name, in that order). A .npy matrix's columns are named c0, c1, ..."""
    with path.open("rb") as handle:
        magic = handle.read(6)
    if magic == b"\x93NUMPY":
        matrix = np.load(path, mmap_mode="r", allow_pickle=False)
        if matrix.ndim != 2:
            raise ValueError(f"{path} holds a {matrix.ndim}-D array; a 2-D matrix is needed")
        names = [f"c{i}" for i in range(matrix.shape[1])]
        if columns is None:
            return matrix, names
        index = [_position(names, name, path) for name in columns]
        return np.asarray(matrix[:, index], dtype=np.float64), list(columns)
    if magic[:4] == b"PAR1":
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=list(columns) if columns is not None else None)
    else:
        import pyarrow.csv as pa_csv

        table = pa_csv.read_csv(path)
        if columns is not None:
            for name in columns:
                _position(table.column_names, name, path)
            table = table.select(list(columns))
    return table_matrix(table, path)


def _position(names: Sequence[str], name: str, path: Path) -> int:
    if name not in names:
        raise ValueError(f"{path} has no column {name!r} (it has {', '.join(names)})")
    return list(names).index(name)


def table_matrix(table: Any, source: object) -> tuple[np.ndarray, list[str]]:
    """A pyarrow table of numeric columns as a float64 matrix, and its column names."""
    import pyarrow as pa

    names = [str(name) for name in table.column_names]
    if not names or table.num_rows == 0:
        raise ValueError(f"{source} has no data rows")
    matrix = np.empty((table.num_rows, len(names)), dtype=np.float64)
    for j, name in enumerate(names):
        column = table.column(j)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise ValueError(f"column {name!r} is not numeric ({column.type})")
        if column.null_count:
            raise ValueError(f"column {name!r} has {column.null_count} empty values")
        matrix[:, j] = column.to_numpy()
    return matrix, names
