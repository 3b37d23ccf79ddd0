"""A dataset's table terms: what a privacy unit is, how missing values are handled and which
columns are categorical (privclust.tabular), as the upload's form fields declare them.

Settled before a byte is read, like the rest of the terms (app.datasets.terms); everything here
is public, like the domain, except what the ingest counted (`owner_counts`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from app.datasets.domain import DomainSpec
from app.kit.errors import InvalidParameter
from privclust.clustering.run.options import per_row_mu
from privclust.privacy import noise
from privclust.tabular import TableError, TableSpec, check_spec
from privclust.tabular_rows import ShapeCounts

# What a dataset without a privacy unit protects, as the API says it.
ROW_UNIT = "row"


def protects(spec: TableSpec) -> str:
    """What a job's mu protects on a dataset of these terms, in words (the estimate says it)."""
    if spec.privacy_unit is None:
        return (
            "one row, not one person: a person with r rows in this dataset is protected only "
            "at r times this mu (declare privacy_unit at upload to protect people)"
        )
    return (
        f"all the rows of one {spec.privacy_unit!r} (at most {spec.max_rows_per_unit} kept per "
        "unit): this mu is per unit, and every release carries that many times a row's noise"
    )


def _json_object(raw: str | None, field: str) -> dict[str, Any]:
    if raw is None or raw.strip() == "":
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise InvalidParameter(f"{field} must be a JSON object", field=field) from None
    if not isinstance(value, dict):
        raise InvalidParameter(f"{field} must be a JSON object", field=field)
    return value


def parse_table_spec(
    *,
    missing: str | None,
    fill: str | None,
    categories: str | None,
    category_weight: float | None,
    privacy_unit: str | None,
    max_rows_per_unit: int | None,
) -> TableSpec:
    """The spec of the form's fields (JSON objects for `fill` and `categories`), checked (422
    naming the field)."""
    spec = TableSpec(
        missing="reject" if missing in (None, "") else str(missing),
        fill=_json_object(fill, "fill"),
        categories=_json_object(categories, "categories"),
        privacy_unit=privacy_unit or None,
        max_rows_per_unit=max_rows_per_unit,
    )
    if category_weight is not None:
        spec = replace(spec, category_weight=category_weight)
    check_table_spec(spec)
    return spec


def check_table_spec(spec: TableSpec) -> None:
    try:
        check_spec(spec)
    except TableError as exc:
        raise InvalidParameter(str(exc), field=exc.field) from None


def check_table_domain(spec: TableSpec, domain: DomainSpec) -> None:
    """Categorical columns need per-column bounds: their weight acts where each column is
    scaled onto [0, 1] by its bounds."""
    if spec.categories and domain.lower is None:
        raise InvalidParameter(
            "categorical columns need per-column bounds (lower and upper for the numeric "
            "columns), not a ball",
            field="categories",
        )


def check_count_per_unit(count_mu: float | None, spec: TableSpec) -> None:
    """The noisy count of a table of units of m rows is drawn at count_mu / m: refused when that
    noise could not be drawn."""
    m = spec.contribution_bound
    if count_mu is None or m == 1:
        return
    if per_row_mu(count_mu, m) < 1.0 / noise.MAX_NOISE_STD:
        raise InvalidParameter(
            f"with max_rows_per_unit={m} the row count's noise would exceed "
            f"{noise.MAX_NOISE_STD:g}; raise count_mu or epsilon",
            field="max_rows_per_unit",
        )


def stored_domain(domain: DomainSpec, spec: TableSpec) -> DomainSpec:
    """The domain of the stored rows: the numeric columns' bounds, then [0, 1/w] for each
    one-hot column of a categorical one."""
    if not spec.categories or domain.lower is None or domain.upper is None:
        return domain
    lower, upper = spec.extend_bounds(list(domain.lower), list(domain.upper))
    return replace(domain, lower=lower, upper=upper)


def release_count(n_rows: int, count_mu: float, spec: TableSpec) -> int:
    """N~ for neighbours that differ by one unit: a unit moves the count by up to m, so the
    count is released at the per-row count_mu / m (privclust.clustering.run.options.per_row_mu)."""
    return noise.release_count(n_rows, per_row_mu(count_mu, spec.contribution_bound))


def stored_spec(spec: TableSpec) -> dict[str, Any] | None:
    """What a dataset records of its table terms (None: a plain table)."""
    return None if spec == TableSpec() else spec.public()


def owner_counts(counts: ShapeCounts, spec: TableSpec) -> dict[str, int] | None:
    """Owner-only, like the exact row count: what the policy and the unit bound did."""
    if spec.plain:
        return None
    return {name: int(value) for name, value in vars(counts).items()}
