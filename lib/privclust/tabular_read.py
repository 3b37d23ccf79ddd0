"""A caller's own table shaped by its declared terms (privclust.tabular) for a run without the
service: the CLI's `privclust cluster` and `PrivateKMeans` read a CSV or Parquet file, or take
a pandas DataFrame or an array (with `groups` for the unit), and get the rows the service would
store, the stored columns' names, the declared domain extended over the one-hot columns, and the
contribution bound every release is then calibrated for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from privclust.privacy.noise import secure_generator
from privclust.tabular import TableError, TableSpec, check_columns, check_spec
from privclust.tabular_rows import Block, ShapeCounts, TableShaper, bound_units, check_rows_left

MISSING_MARKERS = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None"]


@dataclass(frozen=True)
class ShapedTable:
    """The stored rows, their columns, the domain keywords for `cluster` and the counts."""

    rows: np.ndarray
    columns: list[str]
    domain: dict[str, Any]
    contribution_bound: int
    counts: ShapeCounts


def read_table(path: Path, spec: TableSpec, columns: list[str] | None) -> Any:
    """A CSV or Parquet file as a pyarrow table: numbers as float64, text columns as text, the
    missing markers as nulls."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic == b"PAR1":
        return pq.read_table(path)
    text = {c: pa.string() for c in spec.categories}
    if spec.privacy_unit is not None:
        text[spec.privacy_unit] = pa.string()
    options = pa_csv.ConvertOptions(
        column_types=text,
        null_values=MISSING_MARKERS,
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )
    return pa_csv.read_csv(path, convert_options=options)


def shape_table(
    table: Any,
    spec: TableSpec,
    domain: dict[str, Any],
    columns: list[str] | None = None,
    groups: Any = None,
) -> ShapedTable:
    """Shape a pyarrow table (or a pandas DataFrame) by `spec`; `groups` gives each row's unit
    when the table has no unit column. `domain` is `cluster`'s (a ball, or `lower`/`upper` for
    the numeric columns only). TableError names what is refused."""
    # With `groups` the units come from the caller, not a column: m is checked by `m_of`.
    check_spec(spec if groups is None else replace(spec, max_rows_per_unit=None))
    table = _as_columns(table)
    names = list(table)
    data = columns if columns is not None else [n for n in names if n != spec.privacy_unit]
    numeric = check_columns(spec, names, data)
    centre = _centre(domain, len(numeric))
    shaper = TableShaper(spec, numeric, centre)
    values = np.column_stack([_floats(table[c]) for c in numeric] or [np.empty((_rows(table), 0))])
    text = {c: _text(table[c]) for c in data if c in spec.categories}
    units = _units(table, spec, groups)
    bound = 1 if units is None else m_of(spec)
    rows, kept_units = shaper.shape(Block(values, text, units, 1))
    if kept_units is not None:
        keep = bound_units(kept_units, bound, secure_generator())
        shaper.counts.rows_dropped_unit_bound = int((~keep).sum())
        rows = rows[keep]
    check_rows_left(rows.shape[0], spec)
    return ShapedTable(
        rows=rows,
        columns=numeric + spec.one_hot_columns(),
        domain=_extended(domain, spec),
        contribution_bound=bound,
        counts=shaper.counts,
    )


def m_of(spec: TableSpec) -> int:
    if spec.max_rows_per_unit is None:
        raise TableError("groups need max_rows_per_unit", field="max_rows_per_unit")
    return spec.max_rows_per_unit


def _units(table: Any, spec: TableSpec, groups: Any) -> np.ndarray | None:
    if groups is not None:
        if spec.privacy_unit is not None:
            raise TableError("give groups or privacy_unit, not both", field="groups")
        m_of(spec)
        units = np.asarray(groups, dtype=object)
        if units.shape != (_rows(table),):
            raise TableError("groups needs one unit per row", field="groups")
        return units
    if spec.privacy_unit is None:
        return None
    return _text(table[spec.privacy_unit])


def _as_columns(table: Any) -> dict[str, Any]:
    """A table's columns by name: a pyarrow table's (as Arrow arrays), a DataFrame's or a dict
    of arrays (as numpy arrays, NaN or None for a missing value)."""
    if hasattr(table, "column_names"):  # a pyarrow table
        return {str(n): table.column(n) for n in table.column_names}
    if hasattr(table, "columns") and hasattr(table, "dtypes"):  # a pandas DataFrame
        return {str(c): _frame_column(table[c]) for c in table.columns}
    return {str(name): np.asarray(values) for name, values in table.items()}


def _frame_column(series: Any) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series):
        return np.asarray(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return np.asarray([None if pd.isna(v) else v for v in series], dtype=object)


def _rows(table: dict[str, Any]) -> int:
    return len(next(iter(table.values()))) if table else 0


def _floats(column: Any) -> np.ndarray:
    if isinstance(column, np.ndarray):
        if column.dtype.kind not in "iuf":
            raise TableError(f"a column of type {column.dtype} is not numeric", field="categories")
        return column.astype(np.float64)
    import pyarrow as pa

    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise TableError(f"a column of type {column.type} is not numeric", field="categories")
    as_float = column.cast(pa.float64()).fill_null(float("nan"))
    return np.asarray(as_float.to_numpy(), dtype=np.float64)


def _text(column: Any) -> np.ndarray:
    if isinstance(column, np.ndarray):
        return np.array(
            [None if v is None or (isinstance(v, float) and v != v) else v for v in column],
            dtype=object,
        )
    import pyarrow as pa

    as_text = column if pa.types.is_string(column.type) else column.cast(pa.string())
    return np.asarray(as_text.to_pylist(), dtype=object)


def _centre(domain: dict[str, Any], p: int) -> list[float]:
    """Each numeric column's default fill: the centre of its declared domain."""
    if domain.get("lower") is not None:
        lower, upper = np.asarray(domain["lower"], float), np.asarray(domain["upper"], float)
        if lower.shape != (p,):
            raise TableError(f"lower/upper need one value per numeric column ({p})", field="lower")
        return list((lower + upper) / 2)
    center = domain.get("center")
    return [0.0] * p if center is None else [float(c) for c in np.asarray(center).ravel()]


def _extended(domain: dict[str, Any], spec: TableSpec) -> dict[str, Any]:
    if not spec.categories:
        return domain
    if domain.get("lower") is None:
        raise TableError("categorical columns need lower and upper bounds", field="categories")
    lower, upper = spec.extend_bounds(list(domain["lower"]), list(domain["upper"]))
    return {**domain, "lower": lower, "upper": upper}


def read_shaped(
    path: Path, spec: TableSpec, domain: dict[str, Any], columns: list[str] | None
) -> ShapedTable:
    """`shape_table` of a CSV or Parquet file."""
    return shape_table(read_table(path, spec, columns), spec, domain, columns)
