"""Health checks: /healthz (process up) and /readyz (database and Redis reachable)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from app.kit import queue
from app.kit.problems import problem_response, responses

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


@router.get("/healthz", response_model=Health, operation_id="health_live")
def health_live() -> Health:
    """Liveness: the API process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    operation_id="health_ready",
    responses=responses(503, validation=False),
)
def health_ready(request: Request) -> Health | JSONResponse:
    """Readiness: the database and Redis are reachable (503 names the one that is not)."""
    settings = request.app.state.settings
    failing = []
    try:
        with request.app.state.sessionmaker() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:
        failing.append(f"database: {type(exc).__name__}")
    try:
        queue.redis_connection(queue.resolve_redis_url(settings)).ping()
    except Exception as exc:
        failing.append(f"redis: {type(exc).__name__}: {exc}"[:200])
    if failing:
        return problem_response(
            503,
            "not-ready",
            "Not ready",
            "; ".join(failing),
            failing=[f.split(":")[0] for f in failing],
        )
    return Health(status="ready")
