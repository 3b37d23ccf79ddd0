"""The one problem+json handler: every error leaves the API as an RFC 9457 document."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import get_route_path

from app.kit.errors import PrivclustError
from app.kit.problem_types import TYPE_PATH

log = logging.getLogger("privclust.api")
PROBLEM_JSON = "application/problem+json"
# A problem's `type`: a page on this service that says what the code means (app.ops.problems),
# relative to the API's address (RFC 9457 3.1.1 resolves it against the request's URI).
TYPE_BASE = TYPE_PATH


class Problem(BaseModel):
    """RFC 9457 problem details, plus a stable machine-readable `code`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "example": {
                "type": TYPE_BASE + "budget-exceeded",
                "title": "Privacy budget exceeded",
                "status": 409,
                "detail": "this job needs mu=0.5 but only mu=0.2 remains",
                "code": "budget-exceeded",
                "mu_requested": 0.5,
                "mu_remaining": 0.2,
                "epsilon_remaining": 0.71,
                "mu_cap": 1.1,
            }
        },
    )

    type: str
    title: str
    status: int
    detail: str
    code: str


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {
        "type": TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    sent = dict(headers or {})
    if status == 401:
        sent.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=sent or None)


_STATUS_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "too-large",
    415: "unsupported-media-type",
}


# The detail of the HTTPException FastAPI raises when a body cannot be read as JSON.
_BODY_PARSE_ERROR = "There was an error parsing the body"


def _field_of(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "form")]
    return ".".join(parts) or "body"


# Checks a request's credentials before its 422 is sent (app.keys.auth): installed by the app.
CredentialCheck = Callable[[Request], Awaitable[None]]


def install(app: FastAPI, check_credentials: CredentialCheck) -> None:
    """Register the handlers that turn every error into a problem document.

    `check_credentials` runs before a validation error is answered, so a caller without a
    valid key gets its 401/403, never a 422 that describes what the route accepts."""
    app.add_exception_handler(PrivclustError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_handler(check_credentials))
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_down)
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(RedisConnectionError, _queue_down)
    app.add_exception_handler(RedisTimeoutError, _queue_down)


async def _domain_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PrivclustError)
    response = problem_response(exc.status, exc.code, exc.title, exc.detail, **exc.extra)
    response.headers.update(exc.headers)  # e.g. the Retry-After of a 429
    return response


async def _answer_as_handled(request: Request, denied: Exception) -> JSONResponse | None:
    """The response the app's own handler gives `denied` (a 401/403, or a 503 when the
    database is down), or None when no specific handler takes it."""
    for cls in type(denied).__mro__:
        handler = request.app.exception_handlers.get(cls)
        if handler is not None and cls is not Exception:
            response: JSONResponse = await handler(request, denied)
            return response
    return None


def _validation_handler(
    check_credentials: CredentialCheck,
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def _validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        try:
            await check_credentials(request)
        except Exception as denied:  # 401/403, or 503 when the database is down
            handled = await _answer_as_handled(request, denied)
            if handled is None:
                raise
            return handled
        return _validation_problem(request, exc)

    return _validation


def _validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    ctype = request.headers.get("content-type", "")
    if (
        request.method == "POST"
        and request.url.path.rstrip("/") == "/v1/datasets"
        and not ctype.startswith("multipart/form-data")
    ):
        return problem_response(
            415,
            "unsupported-media-type",
            "Unsupported media type",
            "upload a dataset as multipart/form-data with a `file` part",
        )
    errors = [
        {
            # A body that is not JSON at all has no field: its loc holds a byte offset.
            "field": "body" if e.get("type") == "json_invalid" else _field_of(e.get("loc", ())),
            "message": _message(e),
        }
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    return problem_response(
        422,
        "invalid-parameter",
        "Invalid parameter",
        f"{first['field']}: {first['message']}",
        field=first["field"],
        errors=errors,
    )


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _message(error: Mapping[str, Any]) -> str:
    """A validation error's message, in words: a pattern mismatch names no expression (the
    schema states the pattern; the detail says what is wrong, not how it is matched)."""
    if error.get("type") == "string_pattern_mismatch":
        return "does not have the form this field takes (see its description in the API schema)"
    return str(error.get("msg", ""))


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{[^}/]+\}", template)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


def allowed_methods(request: Request, fallback: str | None) -> str | None:
    """The `Allow` header of a 405 (RFC 9110, 15.5.6): every method the API document lists for
    this path, not only those of the route the router happened to try first (GET and DELETE
    of a dataset are two routes). Paths outside the document (the docs pages) keep the
    router's own `fallback`."""
    path = get_route_path(request.scope)
    methods = {
        method.upper()
        for template, operations in request.app.openapi().get("paths", {}).items()
        if _template_regex(template).fullmatch(path)
        for method in operations
        if method in _METHODS
    }
    return ", ".join(sorted(methods)) if methods else fallback


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _BODY_PARSE_ERROR:
        # FastAPI's answer to a JSON body it cannot even decode (e.g. not UTF-8). A body
        # that is not valid JSON is already a 422 `invalid-parameter`: so is this one.
        return problem_response(
            422,
            "invalid-parameter",
            "Invalid parameter",
            "body: the request body could not be parsed as JSON",
            field="body",
            errors=[{"field": "body", "message": "not a JSON document"}],
        )
    code = _STATUS_CODES.get(exc.status_code, "error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allow = allowed_methods(request, headers.pop("Allow", None) or headers.pop("allow", None))
        if allow:
            headers["Allow"] = allow
    return problem_response(
        exc.status_code,
        code,
        code.replace("-", " ").capitalize(),
        str(exc.detail),
        headers=headers,
    )


def _unavailable(
    what: str, code: str, title: str, detail: str
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """The handler of a dependency that cannot be reached: logged, and a 503 `code`."""

    async def handler(_: Request, exc: Exception) -> JSONResponse:
        log.error("%s error: %s", what, exc)
        return problem_response(503, code, title, detail)

    return handler


_database_down = _unavailable(
    "database",
    "database-unavailable",
    "Database unavailable",
    "the database could not be reached; nothing was changed",
)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # A bug, not a client error: still a problem document, never a text/plain page.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        500, "internal-error", "Internal server error", "an unexpected error; it was logged"
    )


_queue_down = _unavailable(
    "redis",
    "queue-unavailable",
    "Job queue unavailable",
    "the job queue (Redis) could not be reached; nothing was charged",
)


PROBLEM_SCHEMA_REF = {"$ref": "#/components/schemas/Problem"}


def responses(
    *statuses: int, validation: bool = True, database: bool = True
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries for the problems a route can return.

    Described under `application/problem+json` only (what the API sends), so generated clients
    parse errors into the Problem model. `app.main` registers the Problem schema.

    Every route that reads the database (each one that checks an API key does) can answer 503
    `database-unavailable`: while the database is down, or on SQLite while another process (a
    worker recording progress) holds the write lock longer than the busy timeout. So 503 is
    listed unless `database=False`, as 422 is unless `validation=False`.
    """
    descriptions = {
        400: "Bad input file",
        401: "Missing or invalid API key",
        403: "The key's role may not do this (or an import source that is not allowed)",
        404: "Not found (or another tenant's)",
        409: "Conflict (budget exceeded, idempotency key reused, ...)",
        410: "Gone (the dataset's rows were deleted)",
        413: "Upload too large",
        415: "Not multipart/form-data",
        422: "Invalid parameter",
        429: "Too many of the tenant's or the key's jobs are queued (see Retry-After)",
        502: "A federation's member failed after the charge (what was charged stays charged)",
        503: "Database, queue or object storage unavailable (nothing was changed)",
    }
    # 422 is listed on every route that takes input, so FastAPI's default validation schema
    # never appears: every validation error is a problem document too.
    codes = {*statuses, *((422,) if validation else ()), *((503,) if database else ())}
    return {
        s: {
            "description": descriptions[s],
            "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA_REF}},
        }
        for s in sorted(codes)
    }
