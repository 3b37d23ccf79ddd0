"""`privclust cluster`'s table terms: a privacy unit with its m, missing values by a declared
policy and categorical columns (privclust.tabular), read and shaped as the service would.

Without any of them the file is read as ever (numbers only, one row one unit) and the run
protects one row, not one person.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from privclust.tabular import DEFAULT_CATEGORY_WEIGHT, TableSpec


def add_table_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--privacy-unit",
        help="the column that identifies one unit of privacy (a person, a customer): each "
        "unit keeps at most --max-rows-per-unit rows, chosen at random, and every release is "
        "calibrated for one unit's rows. Without it the run protects one row, not one person",
    )
    p.add_argument("--max-rows-per-unit", type=int, help="m, required with --privacy-unit")
    p.add_argument(
        "--missing",
        choices=["reject", "drop-row", "fill"],
        default="reject",
        help="missing values: refused (default), rows dropped, or filled (--fill; else the "
        "centre of the column's declared domain)",
    )
    p.add_argument("--fill", type=_object, help='fill values per column, JSON: {"age": 40}')
    p.add_argument(
        "--categories",
        type=_object,
        help='categorical columns, JSON: {"plan": ["basic", "premium"]} (one-hot encoded; '
        "--lower/--upper then bound the numeric columns only)",
    )
    p.add_argument(
        "--category-weight",
        type=float,
        default=DEFAULT_CATEGORY_WEIGHT,
        help=f"weight of a one-hot coordinate (default {DEFAULT_CATEGORY_WEIGHT})",
    )


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def table_spec(args: argparse.Namespace) -> TableSpec:
    return TableSpec(
        missing=args.missing,
        fill=args.fill or {},
        categories=args.categories or {},
        category_weight=args.category_weight,
        privacy_unit=args.privacy_unit,
        max_rows_per_unit=args.max_rows_per_unit,
    )


def read_rows_of(
    args: argparse.Namespace, domain: Callable[[argparse.Namespace], dict[str, Any]]
) -> tuple[Any, list[str]]:
    """The rows and columns of `args.file`: shaped by its table terms when it has any (then
    `args` takes the domain over the stored columns and the contribution bound), else read as
    ever. ValueError (ClusteringInputError included) says what is refused."""
    from privclust.tables import read_rows
    from privclust.tabular import TableError
    from privclust.tabular_read import read_shaped

    args.contribution_bound = 1
    spec = table_spec(args)
    if spec.plain and args.max_rows_per_unit is None:
        return read_rows(args.file, args.columns)
    try:
        shaped = read_shaped(args.file, spec, domain(args), args.columns)
    except TableError as exc:
        raise ValueError(f"--{exc.field.replace('_', '-')}: {exc}") from exc
    if "lower" in shaped.domain:
        args.lower, args.upper = [list(shaped.domain["lower"])], [list(shaped.domain["upper"])]
    args.contribution_bound = shaped.contribution_bound
    if len(args.k) > 1 and shaped.contribution_bound > 1:
        raise ValueError("a sweep over k with --privacy-unit is not supported: give one --k")
    return shaped.rows, shaped.columns
