"""Flat tables for dashboards and notebooks: one row per record, as JSON rows or as CSV.

Grafana's Infinity data source, Evidence, Observable and pandas read either from a URL with a
bearer token. JSON rows are an array of objects; CSV has a header line and the same columns.
Floats are written as Python's shortest round-trip form, so both parse to the same numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from app.kit.problems import responses

CSV_MEDIA_TYPE = "text/csv"

TableFormat = Annotated[
    Literal["json", "csv"] | None,
    Query(
        alias="format",
        description="`json` (rows: an array of objects) or `csv`; without it, CSV when the "
        "Accept header asks for text/csv, else JSON.",
    ),
]


def wants_csv(request: Request, fmt: str | None) -> bool:
    """`?format=` wins; else the Accept header."""
    if fmt is not None:
        return fmt == "csv"
    return CSV_MEDIA_TYPE in request.headers.get("accept", "")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """The rows as CSV with a header line (None as an empty cell)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(name)) for name in columns])
    return out.getvalue()


def table_response(
    request: Request,
    fmt: str | None,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The rows as the client asked for them (`wants_csv`)."""
    sent = {"Vary": "Accept", **(headers or {})}
    if wants_csv(request, fmt):
        return Response(csv_text(rows, columns), media_type=CSV_MEDIA_TYPE, headers=sent)
    data = [{name: row.get(name) for name in columns} for row in rows]
    return JSONResponse(jsonable_encoder(data), headers=sent)


def table_responses(description: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses=` of a table's route: its 200 as JSON rows (the route's
    response_model) or CSV, and the problems it can return (app.kit.problems.responses)."""
    return {
        200: {
            "description": description,
            "content": {CSV_MEDIA_TYPE: {"schema": {"type": "string"}}},
        },
        **responses(*statuses),
    }
