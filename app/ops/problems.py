"""GET /problems/{code}: the page a problem document's `type` URI opens (app.kit.problem_types).

HTML for a browser, JSON (`code`, `title`, `description`) when the request asks for
application/json. Public, like the API's schema: it describes codes, never a tenant's data.
Not in the OpenAPI document (it serves the documents' links, not API clients).
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from app.kit.errors import NotFound
from app.kit.problem_types import PROBLEM_TYPES, TYPE_PATH, ProblemType

router = APIRouter(tags=["problems"])

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - privclust</title></head>
<body><main>{body}</main></body></html>
"""


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "json" in accept and "text/html" not in accept


def _entry(code: str, problem: ProblemType) -> dict[str, str]:
    return {
        "type": TYPE_PATH + code,
        "code": code,
        "title": problem.title,
        "description": problem.description,
    }


@router.get("/problems", include_in_schema=False)
def problem_index(request: Request) -> Response:
    """Every problem code the API sends, with what it means."""
    if _wants_json(request):
        return JSONResponse([_entry(c, p) for c, p in sorted(PROBLEM_TYPES.items())])
    items = "".join(
        f'<li><a href="{TYPE_PATH}{escape(c)}"><code>{escape(c)}</code></a>: {escape(p.title)}</li>'
        for c, p in sorted(PROBLEM_TYPES.items())
    )
    body = (
        f"<h1>Problem types</h1><p>Every error is a problem document (RFC 9457) with one of "
        f"these codes.</p><ul>{items}</ul>"
    )
    return HTMLResponse(_PAGE.format(title="Problem types", body=body))


@router.get("/problems/{code}", include_in_schema=False)
def problem_page(code: str, request: Request) -> Response:
    """What one problem code means (404 `not-found` for a code the API never sends)."""
    problem = PROBLEM_TYPES.get(code)
    if problem is None:
        raise NotFound(f"no problem type {code!r}; GET {TYPE_PATH.rstrip('/')} lists them")
    if _wants_json(request):
        return JSONResponse(_entry(code, problem))
    body = (
        f"<h1>{escape(problem.title)}</h1><p><code>{escape(code)}</code></p>"
        f"<p>{escape(problem.description)}</p>"
        f'<p><a href="{TYPE_PATH.rstrip("/")}">Every problem type</a> &middot; '
        f'<a href="/docs">API reference</a> &middot; <a href="/console/">Console</a></p>'
    )
    return HTMLResponse(_PAGE.format(title=escape(problem.title), body=body))
