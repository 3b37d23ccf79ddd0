"""Shaping a table's rows by its declared `privclust.tabular.TableSpec`: missing values by the
policy, categories one-hot encoded, and each privacy unit bounded to m rows chosen uniformly at
random. Blocks of raw columns go in (numbers with NaN for a missing value; text with None for a
missing one); float64 rows come out. How many rows were dropped or filled is counted for the
owner only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privclust.tabular import TableError, TableSpec

Floats = npt.NDArray[np.float64]


@dataclass
class ShapeCounts:
    """Owner-only: rows read, dropped for a missing (or undeclared) value, kept with a filled
    cell, and dropped by the unit bound."""

    rows_read: int = 0
    rows_dropped_missing: int = 0
    rows_filled: int = 0
    rows_dropped_unit_bound: int = 0


@dataclass(frozen=True)
class Block:
    """Raw columns of consecutive rows: `numeric` (n x p, NaN: missing), each categorical
    column's text (None: missing) and the unit column's text (None: missing)."""

    numeric: Floats
    text: Mapping[str, npt.NDArray[np.object_]]
    units: npt.NDArray[np.object_] | None
    first_row: int


class TableShaper:
    """Turns raw blocks into stored rows: numeric columns (in `numeric` order), then the one-hot
    columns (`spec.one_hot_columns()`). `centre` is each numeric column's default fill: the
    centre of its declared domain."""

    def __init__(
        self,
        spec: TableSpec,
        numeric: Sequence[str],
        centre: Sequence[float],
        where: object = None,
    ) -> None:
        self.spec, self.numeric = spec, list(numeric)
        self.counts = ShapeCounts()
        self._where = where if callable(where) else (lambda row: f"Row {row} (counted from 1)")
        fill = spec.fill
        self._numeric_fill = np.array(
            [float(fill.get(c, centre[j])) for j, c in enumerate(numeric)], dtype=np.float64
        )

    @property
    def width(self) -> int:
        return len(self.numeric) + len(self.spec.one_hot_columns())

    def shape(self, block: Block) -> tuple[Floats, npt.NDArray[np.object_] | None]:
        """The block's stored rows and their units (None without a privacy unit)."""
        n = block.numeric.shape[0]
        self.counts.rows_read += n
        self._refuse_infinite(block)
        missing = np.isnan(block.numeric)
        codes = {c: self._codes(c, v) for c, v in block.text.items()}
        bad = missing.any(axis=1)
        for c in codes:
            bad |= codes[c] < 0
        unit_missing = self._unit_missing(block)
        if self.spec.missing == "reject":
            self._refuse_first(block, missing, codes, unit_missing)
        keep = ~unit_missing if self.spec.missing == "fill" else ~(bad | unit_missing)
        self.counts.rows_dropped_missing += int(n - keep.sum())
        if self.spec.missing == "fill":
            self.counts.rows_filled += int((bad & keep).sum())
        rows = self._encode(block.numeric, missing, codes)[keep]
        units = None if block.units is None else block.units[keep]
        return rows, units

    def _refuse_infinite(self, block: Block) -> None:
        inf = np.isinf(block.numeric)
        if inf.any():
            i, j = np.argwhere(inf)[0]
            row, column = block.first_row + int(i), self.numeric[int(j)]
            raise TableError(
                f"{self._where(row)}, column {column!r}: the value is infinite; only finite "
                "numbers are accepted.",
                field="file",
                code="non-finite-value",
                row=row,
                column=column,
            )

    def _codes(self, column: str, values: npt.NDArray[np.object_]) -> np.ndarray:
        """Each value's index among the column's categories; -1 missing, -2 undeclared."""
        index = {v: i for i, v in enumerate(self.spec.categories[column])}
        return np.array([-1 if v is None else index.get(str(v), -2) for v in values], dtype=int)

    def _unit_missing(self, block: Block) -> npt.NDArray[np.bool_]:
        n = block.numeric.shape[0]
        if block.units is None:
            return np.zeros(n, dtype=bool)
        return np.array([u is None or str(u) == "" for u in block.units], dtype=bool)

    def _refuse_first(
        self,
        block: Block,
        missing: npt.NDArray[np.bool_],
        codes: Mapping[str, np.ndarray],
        unit_missing: npt.NDArray[np.bool_],
    ) -> None:
        """Under `reject`, the first missing or undeclared cell in reading order (row, then
        column); the message never quotes the value."""
        cells = [(missing[:, j], c, False) for j, c in enumerate(self.numeric)]
        for c in codes:
            cells += [(codes[c] == -1, c, False), (codes[c] == -2, c, True)]
        if self.spec.privacy_unit is not None:
            cells.append((unit_missing, self.spec.privacy_unit, False))
        order = {c: j for j, c in enumerate([*self.numeric, *codes, self.spec.privacy_unit])}
        firsts = [(int(np.flatnonzero(m)[0]), order[c], c, u) for m, c, u in cells if m.any()]
        if not firsts:
            return
        at, _, column, undeclared = min(firsts)
        row = block.first_row + at
        if undeclared:
            raise TableError(
                f"{self._where(row)}, column {column!r}: the value is not one of the declared "
                'categories (missing="reject"; declare it, or missing="drop-row" or "fill").',
                field="categories",
                code="undeclared-category",
                row=row,
                column=column,
            )
        raise TableError(
            f'{self._where(row)}, column {column!r}: the value is missing (missing="reject"; '
            'declare missing="drop-row" or "fill" to accept gaps).',
            field="missing",
            code="missing-value",
            row=row,
            column=column,
        )

    def _encode(
        self, numeric: Floats, missing: npt.NDArray[np.bool_], codes: Mapping[str, np.ndarray]
    ) -> Floats:
        n = numeric.shape[0]
        out = np.empty((n, self.width), dtype=np.float64)
        out[:, : len(self.numeric)] = np.where(missing, self._numeric_fill, numeric)
        at = len(self.numeric)
        for column, values in self.spec.categories.items():
            k = len(values)
            code = codes.get(column, np.full(n, -1))
            fill = self.spec.fill.get(column)
            one_hot = np.zeros((n, k))
            known = code >= 0
            one_hot[np.flatnonzero(known), code[known]] = 1.0
            # A gap (or an undeclared value) under "fill": the declared category, else the
            # centre of the column's domain, 1/K of each category.
            if fill is None:
                one_hot[~known] = 1.0 / k
            else:
                one_hot[np.flatnonzero(~known), list(values).index(str(fill))] = 1.0
            out[:, at : at + k] = one_hot
            at += k
        return out


def bound_units(
    units: npt.NDArray[np.object_], m: int, rng: np.random.Generator
) -> npt.NDArray[np.bool_]:
    """Which rows to keep so that each unit keeps at most m of its rows, chosen uniformly at
    random: each row draws a 63-bit priority from `rng` (the job's secure generator) and a unit
    keeps its m lowest (ties between priorities are broken by position: probability ~n^2/2^64)."""
    n = units.shape[0]
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    _, codes = np.unique(units.astype(str), return_inverse=True)
    priority = rng.integers(0, 2**63 - 1, size=n, dtype=np.int64)
    order = np.lexsort((priority, codes))
    grouped = codes[order]
    starts = np.r_[True, grouped[1:] != grouped[:-1]]
    first_of_group = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    rank = np.arange(n) - first_of_group
    keep[order[rank < m]] = True
    return keep


def check_rows_left(n_rows: int, spec: TableSpec) -> None:
    """No rows left after the policy (e.g. a column all missing under drop-row): refused."""
    if n_rows == 0:
        raise TableError(
            f'no rows are left once missing values are handled (missing="{spec.missing}")',
            field="missing",
            code="empty-dataset",
        )
