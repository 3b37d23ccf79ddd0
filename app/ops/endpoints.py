"""GET /metrics: Prometheus text format, for admin keys only (docs/operations.md says why)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.keys.auth import CurrentKey, require
from app.kit.deps import UnitOfWorkRoute
from app.kit.errors import BudgetExceeded
from app.kit.problems import problem_response
from app.ops.metrics import CONTENT_TYPE, Metrics

router = APIRouter(tags=["metrics"], route_class=UnitOfWorkRoute)


# Not in the OpenAPI document: it is for Prometheus, not for API clients, and is not JSON.
@router.get("/metrics", include_in_schema=False)
def metrics_scrape(request: Request, key: CurrentKey) -> Response:
    """Prometheus metrics: jobs, queue, uploads, budget refusals and HTTP latency."""
    require(key, "admin")
    metrics: Metrics = request.app.state.metrics
    return Response(metrics.render(), media_type=CONTENT_TYPE)


async def budget_refused(request: Request, exc: Exception) -> Response:
    """The usual problem document for a 409 budget-exceeded, counted for /metrics first.

    Registered for BudgetExceeded, which Starlette then prefers to the PrivclustError handler.
    """
    assert isinstance(exc, BudgetExceeded)
    metrics: Metrics = request.app.state.metrics
    metrics.budget_refusals.inc()
    return problem_response(exc.status, exc.code, exc.title, exc.detail, **exc.extra)
