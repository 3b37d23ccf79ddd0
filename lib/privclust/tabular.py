"""Real tables as they come: a declared policy for missing values, categorical columns one-hot
encoded with a declared weight, and a privacy unit whose rows are bounded to m per unit.

Everything here is declared by the owner, never computed from the data: a fill value is the
owner's, or the centre of the column's declared domain (no mean, median or mode), the categories
are listed up front, and the rows a unit keeps are chosen uniformly at random with the job's
secure generator. The service's ingest and `PrivateKMeans` shape rows through the same code.

Categorical columns: column c with K declared categories becomes K stored columns `c=value`,
holding 1 for the row's category and 0 elsewhere, with declared bounds [0, 1/w] for the category
weight w (0 < w <= 1). A box dataset is clustered with each column scaled onto [0, 1] by its
bounds (privclust.clustering.data.scaling), so there a one-hot coordinate is w, not 1: two rows
that differ only in one categorical column are w * sqrt(2) apart, where a numeric column's whole
declared range counts 1. A centre's coordinates there, in the columns' own units, are the
shares of each category among the rows it represents (`category_shares`: clipped, renormalised).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MISSING_POLICIES = ("reject", "drop-row", "fill")
# The weight of a one-hot coordinate relative to a numeric column's declared range (module
# docstring). Measured (bench/category_weight.py, bench/RESULTS.md "category weight"): on the
# transactions table, w <= 0.3 finds the segments (centres within 1% of range at epsilon 1),
# w >= 0.5 lets the categories outweigh them (k-means splits by plan, 15% off); 0.2 is the
# middle of what works.
DEFAULT_CATEGORY_WEIGHT = 0.2
MAX_CATEGORIES = 100
ONE_HOT_SEPARATOR = "="


class TableError(ValueError):
    """A table the declared policy refuses: `field` is the request field at fault, `row` and
    `column` the first offending cell (rows counted from 1), `code` the error's kind."""

    def __init__(
        self,
        message: str,
        *,
        field: str,
        code: str = "invalid-parameter",
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.field, self.code, self.row, self.column = field, code, row, column


@dataclass(frozen=True)
class TableSpec:
    """How a table's rows become stored rows (module docstring). Public, like the domain."""

    missing: str = "reject"
    fill: Mapping[str, float | str] = field(default_factory=dict)
    categories: Mapping[str, Sequence[str]] = field(default_factory=dict)
    category_weight: float = DEFAULT_CATEGORY_WEIGHT
    privacy_unit: str | None = None
    max_rows_per_unit: int | None = None

    @property
    def plain(self) -> bool:
        """Rows as numbers only, one row one unit, nothing missing allowed: today's ingest."""
        return self.missing == "reject" and not self.categories and self.privacy_unit is None

    @property
    def contribution_bound(self) -> int:
        """m: how many rows one unit of privacy may have (1: a row is the unit)."""
        return 1 if self.privacy_unit is None else int(self.max_rows_per_unit or 1)

    def one_hot_columns(self) -> list[str]:
        return [
            f"{column}{ONE_HOT_SEPARATOR}{value}"
            for column, values in self.categories.items()
            for value in values
        ]

    def extend_bounds(self, lower: list[float], upper: list[float]) -> tuple[list[float], ...]:
        """Box bounds of the numeric columns, followed by [0, 1/w] for each one-hot column."""
        n = len(self.one_hot_columns())
        return lower + [0.0] * n, upper + [1.0 / self.category_weight] * n

    def public(self) -> dict[str, Any]:
        """The spec as the dataset shows it (JSON)."""
        return {
            "missing": self.missing,
            "fill": dict(self.fill),
            "categories": {c: list(v) for c, v in self.categories.items()},
            "category_weight": self.category_weight,
            "privacy_unit": self.privacy_unit,
            "max_rows_per_unit": self.max_rows_per_unit,
        }

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> TableSpec:
        return cls() if not stored else cls(**stored)


def check_spec(spec: TableSpec) -> None:
    """Everything about a spec that needs no table (TableError naming the field)."""
    if spec.missing not in MISSING_POLICIES:
        raise TableError(f"missing must be one of {', '.join(MISSING_POLICIES)}", field="missing")
    if spec.fill and spec.missing != "fill":
        raise TableError('fill values need missing="fill"', field="fill")
    _check_categories(spec.categories)
    w = spec.category_weight
    if isinstance(w, bool) or not isinstance(w, int | float) or not (0.0 < w <= 1.0):
        raise TableError("category_weight must be a number in (0, 1]", field="category_weight")
    _check_unit(spec)
    for column, value in spec.fill.items():
        if column in spec.categories:
            if value not in spec.categories[column]:
                raise TableError(
                    f"fill for {column!r} must be one of its declared categories", field="fill"
                )
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise TableError(f"fill for {column!r} must be a number", field="fill")
        elif not math.isfinite(value):
            raise TableError(f"fill for {column!r} must be finite", field="fill")


def _check_categories(categories: Mapping[str, Sequence[str]]) -> None:
    for column, values in categories.items():
        if not isinstance(values, list | tuple) or not values:
            raise TableError(f"categories of {column!r}: a non-empty list", field="categories")
        if not all(isinstance(v, str) and v for v in values):
            raise TableError(
                f"categories of {column!r} must be non-empty strings", field="categories"
            )
        if len(set(values)) != len(values) or len(values) > MAX_CATEGORIES:
            raise TableError(
                f"categories of {column!r}: at most {MAX_CATEGORIES}, none twice",
                field="categories",
            )


def _check_unit(spec: TableSpec) -> None:
    m = spec.max_rows_per_unit
    if spec.privacy_unit is None:
        if m is not None:
            raise TableError("max_rows_per_unit needs privacy_unit", field="max_rows_per_unit")
        return
    if not isinstance(spec.privacy_unit, str) or not spec.privacy_unit:
        raise TableError("privacy_unit must name a column", field="privacy_unit")
    if spec.privacy_unit in spec.categories or spec.privacy_unit in spec.fill:
        raise TableError("the privacy unit's column is not data", field="privacy_unit")
    if m is None:
        raise TableError(
            "max_rows_per_unit is required with privacy_unit: it is the m every release is "
            "calibrated for (no default would be honest)",
            field="max_rows_per_unit",
        )
    if isinstance(m, bool) or not isinstance(m, int) or not (1 <= m <= 10_000):
        raise TableError(
            "max_rows_per_unit must be an integer from 1 to 10000", field="max_rows_per_unit"
        )


def check_columns(spec: TableSpec, names: Sequence[str], data: Sequence[str]) -> list[str]:
    """The numeric columns of a table whose columns are `names`, keeping `data` (the columns
    asked for); TableError when a declared column is not there."""
    if spec.privacy_unit is not None and spec.privacy_unit not in names:
        raise TableError(
            f"the privacy unit's column {spec.privacy_unit!r} is not in the table",
            field="privacy_unit",
        )
    for column in list(spec.categories) + list(spec.fill):
        if column not in data:
            raise TableError(
                f"column {column!r} is not among the table's columns",
                field=("categories" if column in spec.categories else "fill"),
            )
    clash = sorted(set(spec.one_hot_columns()) & set(names))
    if clash:
        raise TableError(
            f"the one-hot column {clash[0]!r} would have the name of a column of the table",
            field="categories",
        )
    numeric = [c for c in data if c not in spec.categories and c != spec.privacy_unit]
    if not numeric and not spec.categories:
        raise TableError("no data columns are left", field="columns")
    return numeric


def category_shares(
    centres: Sequence[Sequence[float]], columns: Sequence[str], spec: TableSpec
) -> list[dict[str, dict[str, float]]] | None:
    """Per centre, each categorical column's share of each category: the centre's one-hot
    coordinates (in the columns' own units) clipped to [0, 1] and renormalised; uniform where
    they all clip to 0. Post-processing of released centres (None without categories)."""
    if not spec.categories:
        return None
    index = {name: j for j, name in enumerate(columns)}
    out: list[dict[str, dict[str, float]]] = []
    for centre in centres:
        shares: dict[str, dict[str, float]] = {}
        for column, values in spec.categories.items():
            raw = [
                min(max(float(centre[index[f"{column}{ONE_HOT_SEPARATOR}{v}"]]), 0.0), 1.0)
                for v in values
            ]
            total = math.fsum(raw)
            shares[column] = {
                v: (r / total if total > 0 else 1.0 / len(values))
                for v, r in zip(values, raw, strict=True)
            }
        out.append(shares)
    return out
